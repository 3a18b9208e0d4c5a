package cli

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// TestDocsUseRealFlags checks every baton invocation in the code of
// README.md and docs/*.md (shell and unlabelled fenced blocks, and inline
// code) against the commands' real flag sets: a flag renamed or removed
// without its guide leaves a command a reader copies and sees refused with
// exit 2. An invocation is "baton" (or a path ending in /baton) followed
// by one of its subcommands; prose such as "baton runs CMD" is not code
// and is not checked. Arguments after "--" belong to CMD.
func TestDocsUseRealFlags(t *testing.T) {
	root := flagTree()
	files := append(repoGlob(t, "docs", "*.md"), repoGlob(t, "README.md")...)
	checked := 0
	for _, f := range files {
		for _, c := range docCommands(t, f) {
			checked++
			checkFlags(t, root, fmt.Sprintf("%s:%d", c.file, c.line), c.text, c.args)
		}
	}
	if checked == 0 {
		t.Fatal("no baton invocation found in the docs: the extraction is broken")
	}
}

// flagTree returns the CLI's command tree with every flag a user can give.
func flagTree() *cobra.Command {
	root := (&app{}).rootCommand()
	initHelpFlags(root)
	return root
}

// repoGlob returns the files of the repository that match the pattern
// made of parts, relative to the repository's root.
func repoGlob(t *testing.T, parts ...string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(append([]string{repoRoot}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../../../.."

// repoName returns path relative to the repository's root, for messages.
func repoName(path string) string {
	return strings.TrimPrefix(filepath.ToSlash(path), repoRoot+"/")
}

// checkFlags reports each flag of args (the words after "baton") that the
// command they name does not define; where and text say where args are.
func checkFlags(t *testing.T, root *cobra.Command, where, text string, args []string) {
	t.Helper()
	for _, bad := range unknownFlags(root, args) {
		t.Errorf("%s: %s in `%s`: %s has no such flag (see its --help)", where, bad.flag, text, bad.cmd)
	}
}

// initHelpFlags adds the --help (and the root's --version) flag that cobra
// otherwise adds only to the command it executes.
func initHelpFlags(c *cobra.Command) {
	c.InitDefaultHelpFlag()
	c.InitDefaultVersionFlag()
	for _, sub := range c.Commands() {
		initHelpFlags(sub)
	}
}

// docCommand is one baton invocation found in a Markdown file.
type docCommand struct {
	file string
	line int
	text string   // the invocation as written, for the message
	args []string // the words after "baton"
}

var (
	fence      = regexp.MustCompile("^\\s*```+\\s*([A-Za-z]*)")
	inlineCode = regexp.MustCompile("`([^`]+)`")
)

// shellFences are the info strings of fenced blocks whose lines are
// commands: shell, and unlabelled blocks (which also hold output, where a
// baton invocation is still a command a reader may copy).
var shellFences = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}

// docCommands returns the baton invocations in the code of the Markdown
// file path: the lines of shell blocks (joined at a trailing backslash)
// and the inline code of other lines.
func docCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	name := repoName(path)
	var (
		cmds            []docCommand
		inFence, isCode bool
		pending         string // a shell line continued with a backslash
		pendingLine     int
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fence.FindStringSubmatch(line); m != nil {
			inFence = !inFence
			isCode = inFence && shellFences[strings.ToLower(m[1])]
			continue
		}
		switch {
		case inFence && isCode:
			if pending == "" {
				pendingLine = n
			}
			if cont, ok := strings.CutSuffix(line, "\\"); ok {
				pending += cont + " "
				continue
			}
			cmds = append(cmds, invocations(name, pendingLine, pending+line)...)
			pending = ""
		case !inFence:
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				cmds = append(cmds, invocations(name, n, m[1])...)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds
}

// shellEnd holds the words that end a command in a shell line.
var shellEnd = map[string]bool{"|": true, "||": true, "&&": true, ";": true, "&": true, ")": true, "#": true}

// invocations returns the baton invocations in one line of code.
func invocations(file string, line int, code string) []docCommand {
	words := strings.Fields(code)
	var cmds []docCommand
	for i, w := range words {
		w = strings.Trim(w, "\"'$(")
		if w != "baton" && !strings.HasSuffix(w, "/baton") {
			continue
		}
		var args []string
		for _, a := range words[i+1:] {
			if shellEnd[a] || strings.HasPrefix(a, ">") || strings.HasPrefix(a, "2>") {
				break
			}
			a, ended := strings.CutSuffix(a, ";")
			args = append(args, a)
			if ended {
				break
			}
		}
		cmds = append(cmds, docCommand{file: file, line: line, text: strings.Join(append([]string{"baton"}, args...), " "), args: args})
	}
	return cmds
}

// badFlag is a flag an invocation gives that its command does not have.
type badFlag struct{ cmd, flag string }

// unknownFlags returns the flags of args that the command they name does
// not define. It returns nothing for args that do not start with a
// subcommand or a flag: prose, not an invocation.
func unknownFlags(root *cobra.Command, args []string) []badFlag {
	cmd := root
	var bad []badFlag
	for i, a := range args {
		a = strings.Trim(a, "[]`,.")
		switch {
		case a == "--":
			return bad
		case strings.HasPrefix(a, "--"):
			name, _, _ := strings.Cut(a[2:], "=")
			name = strings.TrimRight(name, "]|")
			if name != "" && cmd.Flags().Lookup(name) == nil && cmd.InheritedFlags().Lookup(name) == nil {
				bad = append(bad, badFlag{cmd.CommandPath(), "--" + name})
			}
		case len(a) > 1 && a[0] == '-' && isLetter(a[1]):
			short := a[1:2]
			if cmd.Flags().ShorthandLookup(short) == nil && cmd.InheritedFlags().ShorthandLookup(short) == nil {
				bad = append(bad, badFlag{cmd.CommandPath(), "-" + short})
			}
		default:
			sub := subcommand(cmd, a)
			if sub == nil {
				if i == 0 {
					return nil // "baton is ...": prose in code, not a command
				}
				continue // an argument
			}
			cmd = sub
		}
	}
	return bad
}

// subcommand returns cmd's subcommand called name (or one of its
// aliases), or nil.
func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

// TestDeployManifestsUseRealFlags checks the baton command lines of the
// manifests under deploy/ (a container whose command starts with baton:
// its command's other words and its args) against the CLI's flags, as
// TestDocsUseRealFlags does for the guides: deploy/example is the
// Deployment a reader copies.
func TestDeployManifestsUseRealFlags(t *testing.T) {
	root := flagTree()
	checked := 0
	for _, f := range repoGlob(t, "deploy", "*", "*.yaml") {
		for _, c := range manifestCommands(t, f) {
			checked++
			checkFlags(t, root, c.file+": container "+c.container, c.text, c.args)
		}
	}
	if checked == 0 {
		t.Fatal("no baton container found under deploy/: the extraction is broken")
	}
}

// manifestCommand is the baton command line of a container in a manifest.
type manifestCommand struct {
	file, container, text string
	args                  []string // the words after "baton"
}

// manifestCommands returns the baton command lines of the containers in
// the YAML file path (one or more documents).
func manifestCommands(t *testing.T, path string) []manifestCommand {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name := repoName(path)
	var cmds []manifestCommand
	for _, doc := range strings.Split(string(data), "\n---") {
		var obj any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		walkContainers(obj, func(c map[string]any) {
			words := append(stringList(c["command"]), stringList(c["args"])...)
			if len(words) == 0 || (words[0] != "baton" && !strings.HasSuffix(words[0], "/baton")) {
				return
			}
			container, _ := c["name"].(string)
			cmds = append(cmds, manifestCommand{file: name, container: container, text: strings.Join(words, " "), args: words[1:]})
		})
	}
	return cmds
}

// walkContainers calls f with every map in v that has a command.
func walkContainers(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["command"]; ok {
			f(v)
		}
		for _, e := range v {
			walkContainers(e, f)
		}
	case []any:
		for _, e := range v {
			walkContainers(e, f)
		}
	}
}

// stringList returns the strings of a YAML list, or nil.
func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
