package schemas

import (
	"encoding/json"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// JSONSchemas returns the JSON Schema document of every message type and of
// the envelope, keyed by file name (nodelet.v1.PodDesired.json, ...).
func JSONSchemas() (map[string][]byte, error) {
	r := &jsonschema.Reflector{
		// Decoders accept unknown fields, so the documents allow them too.
		AllowAdditionalProperties: true,
		// k8s types mark optional fields with omitempty only.
		RequiredFromJSONSchemaTags: true,
		Mapper:                     mapKubernetesScalars,
	}
	out := map[string][]byte{}
	add := func(name string, v any) error {
		s := r.Reflect(v)
		s.ID = jsonschema.ID("https://nodelet.dev/schemas/" + Version + "/" + name + ".json")
		s.Title = name
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		out[name+".json"] = append(b, '\n')
		return nil
	}
	if err := add("nodelet."+Version+".Envelope", &Envelope{}); err != nil {
		return nil, err
	}
	for _, m := range All() {
		if err := add(m.SchemaName(), m); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ShortName strips the nodelet.v1. prefix of a schema name.
func ShortName(schema string) string {
	return strings.TrimPrefix(schema, "nodelet."+Version+".")
}

// mapKubernetesScalars describes the k8s types that marshal to scalars by
// their JSON form, not their Go struct.
func mapKubernetesScalars(t reflect.Type) *jsonschema.Schema {
	switch t {
	case reflect.TypeOf(resource.Quantity{}):
		return &jsonschema.Schema{OneOf: []*jsonschema.Schema{{Type: "string"}, {Type: "number"}}}
	case reflect.TypeOf(intstr.IntOrString{}):
		return &jsonschema.Schema{OneOf: []*jsonschema.Schema{{Type: "string"}, {Type: "integer"}}}
	case reflect.TypeOf(metav1.Time{}), reflect.TypeOf(metav1.MicroTime{}):
		return &jsonschema.Schema{Type: "string", Format: "date-time"}
	}
	return nil
}
