package gpuwarden

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRootImportsOnlyStandardLibrary keeps the domain package free of
// drivers, databases and CLI code: every outside dependency lives in a
// package of its own.
func TestRootImportsOnlyStandardLibrary(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s: the root package may import only the standard library", f, path)
			}
			if path == "C" || path == "unsafe" {
				t.Errorf("%s imports %s: no cgo or unsafe code in the domain", f, path)
			}
		}
	}
}
