package bus

import "testing"

// TestPopFrontLetsSentEventsGo: an event the queue has sent (or dropped)
// is no longer reachable through the queue's array, and an empty queue
// holds no array at all.
func TestPopFrontLetsSentEventsGo(t *testing.T) {
	e := &emitter{}
	for _, id := range []string{"a", "b", "c"} {
		e.queue = append(e.queue, pendingEvent{subject: "s", id: id, data: []byte(id)})
	}
	array := e.queue[:cap(e.queue)]
	e.popFront()
	e.popFront()
	if got := e.queue[0].id; got != "c" {
		t.Fatalf("front after two pops: %q, want c", got)
	}
	for i, p := range array[:2] {
		if p.data != nil || p.id != "" {
			t.Errorf("slot %d still holds a sent event: %+v", i, p)
		}
	}
	e.popFront()
	if e.queue != nil {
		t.Errorf("empty queue keeps an array of %d", cap(e.queue))
	}
	if array[2].data != nil {
		t.Errorf("slot 2 still holds a sent event")
	}
}
