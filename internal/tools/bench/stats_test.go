package bench

import (
	"encoding/json"
	"testing"
	"time"
)

func ms(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of odd count is the middle", ms(5, 1, 3), 50, 3 * time.Millisecond},
		{"p50 of even count is the lower middle (nearest rank)", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p99 of 20 is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 99, 20 * time.Millisecond},
		{"p95 of 20 is the 19th", ms(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 95, 19 * time.Millisecond},
		{"p0 is the min", ms(3, 1, 2), 0, time.Millisecond},
		{"p100 is the max", ms(3, 1, 2), 100, 3 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tc.in...)
			if got := Percentile(tc.in, tc.p); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
			}
			for i := range in {
				if in[i] != tc.in[i] {
					t.Fatalf("Percentile sorted its input: %v", tc.in)
				}
			}
		})
	}
}

func TestMedianMeanMax(t *testing.T) {
	tests := []struct {
		in               []time.Duration
		median, mean, mx time.Duration
	}{
		{nil, 0, 0, 0},
		{ms(9), 9 * time.Millisecond, 9 * time.Millisecond, 9 * time.Millisecond},
		{ms(3, 1, 2), 2 * time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond},
		{ms(10, 1, 3, 2), 2500 * time.Microsecond, 4 * time.Millisecond, 10 * time.Millisecond},
	}
	for _, tc := range tests {
		if got := Median(tc.in); got != tc.median {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.median)
		}
		if got := Mean(tc.in); got != tc.mean {
			t.Errorf("Mean(%v) = %v, want %v", tc.in, got, tc.mean)
		}
		if got := Max(tc.in); got != tc.mx {
			t.Errorf("Max(%v) = %v, want %v", tc.in, got, tc.mx)
		}
	}
	if got := Median([]float64{1.5, 0.5, 1, 5}); got != 1.25 {
		t.Errorf("Median = %v, want 1.25", got)
	}
	if got := Ratio(3*time.Second, 2*time.Second); got != 1.5 {
		t.Errorf("Ratio = %v, want 1.5", got)
	}
	if got := Ratio(time.Second, 0); got != 0 {
		t.Errorf("Ratio over zero = %v, want 0", got)
	}
}

func TestDurJSON(t *testing.T) {
	in := struct {
		D Dur `json:"d"`
	}{Dur(1234567 * time.Microsecond)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"d":1.235}` {
		t.Fatalf("marshal = %s, want seconds with millisecond precision", b)
	}
	var out struct {
		D Dur `json:"d"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.D.D() != 1235*time.Millisecond {
		t.Fatalf("round trip = %v", out.D.D())
	}
	if err := json.Unmarshal([]byte(`{"d":"1s"}`), &out); err == nil {
		t.Fatal("a string duration was accepted")
	}
}
