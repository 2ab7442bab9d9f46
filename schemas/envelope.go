package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Version is the schema major version of every type in this package.
const Version = "v1"

// Message is implemented by every type that travels on the bus.
type Message interface {
	// SchemaName is the type's versioned name, e.g. nodelet.v1.PodDesired.
	SchemaName() string
}

// Envelope wraps every message: which schema the data follows, who
// produced it and when.
type Envelope struct {
	Schema   string          `json:"schema"`
	Producer string          `json:"producer"`
	Time     time.Time       `json:"time"`
	Data     json.RawMessage `json:"data"`
}

// ErrSchemaMismatch is returned by Decode when the envelope names another
// schema than the one asked for.
var ErrSchemaMismatch = errors.New("schema mismatch")

// Encode wraps m in an envelope stamped with producer and now.
func Encode(producer string, m Message) ([]byte, error) {
	return EncodeAt(producer, time.Now().UTC(), m)
}

// EncodeAt is Encode with an explicit time, for callers that must produce
// identical bytes for identical content (writes only on change).
func EncodeAt(producer string, t time.Time, m Message) ([]byte, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.SchemaName(), err)
	}
	return json.Marshal(Envelope{Schema: m.SchemaName(), Producer: producer, Time: t, Data: data})
}

// Open parses the envelope only; Data stays raw.
func Open(b []byte) (*Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("decode envelope: %w", err)
	}
	if env.Schema == "" {
		return nil, errors.New("decode envelope: no schema named")
	}
	return &env, nil
}

// Decode parses b as an envelope carrying a T. Unknown fields are accepted
// (forward compatibility); an envelope of another schema is an error
// wrapping ErrSchemaMismatch.
func Decode[T any, PT interface {
	*T
	Message
}](b []byte) (*Envelope, *T, error) {
	env, err := Open(b)
	if err != nil {
		return nil, nil, err
	}
	var v T
	want := PT(&v).SchemaName()
	if env.Schema != want {
		return env, nil, fmt.Errorf("%w: got %s, want %s", ErrSchemaMismatch, env.Schema, want)
	}
	if err := json.Unmarshal(env.Data, &v); err != nil {
		return env, nil, fmt.Errorf("decode %s: %w", want, err)
	}
	return env, &v, nil
}

// DecodeInto is Decode for callers holding a Message value of unknown type.
func DecodeInto(b []byte, m Message) error {
	env, err := Open(b)
	if err != nil {
		return err
	}
	if env.Schema != m.SchemaName() {
		return fmt.Errorf("%w: got %s, want %s", ErrSchemaMismatch, env.Schema, m.SchemaName())
	}
	if err := json.Unmarshal(env.Data, m); err != nil {
		return fmt.Errorf("decode %s: %w", m.SchemaName(), err)
	}
	return nil
}
