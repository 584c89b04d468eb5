package steps

import (
	"fmt"
	"testing"
)

// A start does not compile its workflow's schema again, and the schemas
// kept stay bounded however many there are.
func TestCompiledSchemasCached(t *testing.T) {
	raw := []byte(`{"type":"object","properties":{"cached":{"type":"string"}}}`)
	first, err := compileSchema(raw)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := compileSchema(raw); again != first {
		t.Error("the same schema was compiled twice")
	}
	for i := range compiledMax + 10 {
		if _, err := compileSchema(fmt.Appendf(nil, `{"maxLength":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	compiled.Lock()
	defer compiled.Unlock()
	if n := len(compiled.m); n > compiledMax {
		t.Errorf("%d schemas kept, want at most %d", n, compiledMax)
	}
}
