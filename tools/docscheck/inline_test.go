package docscheck

import (
	"go/types"
	"regexp"
	"strings"
	"testing"
)

var (
	inlineCode = regexp.MustCompile("`([^`]+)`")
	// qualified matches pkg.Name and pkg.Name.Member in inline code.
	qualified = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
)

// TestDocsNameRealAPI checks that every pkg.Name and pkg.Type.Member that
// the prose of README.md and docs/*.md shows in inline code, for a package
// of the packages map, names an exported object of the current package
// (and a field or method of that type): a renamed function, option or
// error otherwise stays in the prose. Arguments are not checked here; the
// Go blocks are type-checked by TestDocsGoCompiles.
func TestDocsNameRealAPI(t *testing.T) {
	imp := exportImporter(t, docBlocks(t))
	pkgs := map[string]*types.Package{}
	checked := 0
	for _, path := range docFiles(t) {
		for _, ref := range inlineRefs(t, path) {
			pkg := pkgs[ref.pkg]
			if pkg == nil {
				var err error
				if pkg, err = imp.Import(packages[ref.pkg]); err != nil {
					t.Fatalf("import %s: %v", packages[ref.pkg], err)
				}
				pkgs[ref.pkg] = pkg
			}
			checked++
			if problem := ref.resolve(pkg); problem != "" {
				t.Errorf("%s:%d: `%s`: %s", ref.file, ref.line, ref.text, problem)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no reference to a package's API found in the docs' inline code: the extraction is broken")
	}
}

// inlineRef is a pkg.Name or pkg.Type.Member in a Markdown file.
type inlineRef struct {
	file              string
	line              int
	text              string
	pkg, name, member string
}

// resolve returns what is wrong with r in pkg, or "".
func (r inlineRef) resolve(pkg *types.Package) string {
	obj := pkg.Scope().Lookup(r.name)
	if obj == nil || !obj.Exported() {
		return pkg.Path() + " has no " + r.name
	}
	if r.member == "" {
		return ""
	}
	tn, ok := obj.(*types.TypeName)
	if !ok {
		return "" // a member of a variable's value (an error's method): not checked
	}
	if m, _, _ := types.LookupFieldOrMethod(types.NewPointer(tn.Type()), true, pkg, r.member); m == nil {
		return r.pkg + "." + r.name + " has no field or method " + r.member
	}
	return ""
}

// inlineRefs returns the references to packages of the map in the inline
// code of the Markdown file path, outside fenced blocks.
func inlineRefs(t *testing.T, path string) []inlineRef {
	t.Helper()
	rel, lines := readDoc(t, path)
	var refs []inlineRef
	inFence := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, code := range inlineCode.FindAllStringSubmatch(line, -1) {
			for _, m := range qualified.FindAllStringSubmatch(code[1], -1) {
				if packages[m[1]] == "" {
					continue
				}
				refs = append(refs, inlineRef{file: rel, line: i + 1, text: m[0], pkg: m[1], name: m[2], member: m[3]})
			}
		}
	}
	return refs
}
