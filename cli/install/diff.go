package install

import (
	"fmt"
	"io"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// What a dry run says a write would do to one object.
const (
	actionCreated   = "created"
	actionChanged   = "changed"
	actionUnchanged = "unchanged"
	// actionConflict is an apply that another field manager's fields would refuse.
	actionConflict = "conflict"
)

// change is what join would do to one object of one cluster, as a dry run found it.
type change struct {
	// cluster is "member" or "broker".
	cluster string
	// kind and name (namespace/name) name the object.
	kind, name string
	// before is the live object, nil when absent; after is what the write would make it. Both are normalized
	// (normalize), and nil for an entry that only says what it would do (note).
	before, after map[string]any
	// action is created, changed or unchanged, or conflict; unset, it follows from before and after.
	action string
	// note says more: the conflicts, or why no content is shown.
	note string
}

// what is the change's action: the one set, else created, changed or unchanged as before and after say.
func (c change) what() string {
	switch {
	case c.action != "":
		return c.action
	case c.before == nil:
		return actionCreated
	case reflect.DeepEqual(c.before, c.after):
		return actionUnchanged
	}
	return actionChanged
}

// diffContext is how many unchanged lines a diff shows around each change, as diff -u.
const diffContext = 3

// renderPlan writes a dry run's changes, the member's and then the broker's, each object on a line with what
// would happen to it, a changed object's unified diff of its YAML below it, and a count per cluster.
func renderPlan(w io.Writer, changes []change) error {
	var b strings.Builder
	for _, cluster := range []string{"member", "broker"} {
		counts := map[string]int{}
		for _, c := range changes {
			if c.cluster != cluster {
				continue
			}
			what := c.what()
			counts[what]++
			fmt.Fprintf(&b, "%-10s %s %s %s", what, cluster, c.kind, c.name)
			if c.note != "" {
				fmt.Fprintf(&b, ": %s", c.note)
			}
			b.WriteString("\n")
			if what != actionChanged || c.after == nil {
				continue
			}
			d, err := yamlDiff(c.before, c.after)
			if err != nil {
				return fmt.Errorf("%s %s: %w", c.kind, c.name, err)
			}
			for line := range strings.Lines(d) {
				b.WriteString("    " + line)
			}
		}
		fmt.Fprintf(&b, "dry run, %s: %d created, %d changed, %d unchanged", cluster, counts[actionCreated], counts[actionChanged], counts[actionUnchanged])
		if n := counts[actionConflict]; n > 0 {
			fmt.Fprintf(&b, ", %d in conflict", n)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// yamlDiff is the unified diff of two objects' YAML, the live one first.
func yamlDiff(before, after map[string]any) (string, error) {
	a, err := yaml.Marshal(before)
	if err != nil {
		return "", err
	}
	b, err := yaml.Marshal(after)
	if err != nil {
		return "", err
	}
	return unifiedDiff("live", "after join", string(a), string(b), diffContext), nil
}

// normalize is an object as a dry run compares it: without what the API server keeps of its own (its
// resourceVersion, generation, uid, creation time, managed fields) and its status, which join never writes.
func normalize(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "status" {
			out[k] = v
		}
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		kept := make(map[string]any, len(md))
		for k, v := range md {
			switch k {
			case "managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink":
			default:
				kept[k] = v
			}
		}
		out["metadata"] = kept
	}
	return out
}

// mergeChange adds to prev, what an earlier write of the same object would make it, what a later write changes:
// next, which the dry run of the later write made from before, the live object (nil when absent), since the
// earlier write was not made. Maps merge key by key; any other value of next that differs from before's replaces
// prev's; a key of before that next drops is dropped. Join writes one object twice only where two field managers
// own parts of it (the member directory entry and its region), so their changes do not overlap.
func mergeChange(prev, before, next map[string]any) map[string]any {
	out := make(map[string]any, len(prev))
	for k, v := range prev {
		out[k] = v
	}
	for k, v := range next {
		old, had := before[k]
		if had && reflect.DeepEqual(old, v) {
			continue
		}
		vm, vIsMap := v.(map[string]any)
		pm, pIsMap := out[k].(map[string]any)
		if vIsMap && pIsMap {
			bm, _ := old.(map[string]any)
			out[k] = mergeChange(pm, bm, vm)
			continue
		}
		out[k] = v
	}
	for k := range before {
		if _, kept := next[k]; !kept {
			delete(out, k)
		}
	}
	return out
}

// unifiedDiff is the unified diff (diff -u) of the texts a and b, named aName and bName in its header, with
// context unchanged lines around each change; "" when they are equal.
func unifiedDiff(aName, bName, a, b string, context int) string {
	if a == b {
		return ""
	}
	ops := editScript(splitLines(a), splitLines(b))
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from context lines before this change to context lines after the last change that follows
		// within 2*context unchanged lines.
		start := max(i-context, 0)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind == ' ' {
				continue
			}
			if j-end-1 > 2*context {
				break
			}
			end = j
		}
		end = min(end+context+1, len(ops))
		writeHunk(&out, ops[start:end])
		i = end
	}
	return out.String()
}

// edit is one line of an edit script: kept (' '), deleted from a ('-') or inserted from b ('+'), with its line
// numbers in a and b (1-based; the next line's where the line is not in that text).
type edit struct {
	kind byte
	line string
	a, b int
}

// writeHunk writes one hunk of a unified diff.
func writeHunk(out *strings.Builder, ops []edit) {
	aLen, bLen := 0, 0
	for _, op := range ops {
		if op.kind != '+' {
			aLen++
		}
		if op.kind != '-' {
			bLen++
		}
	}
	// diff -u numbers an empty range by the line before it.
	aStart, bStart := ops[0].a, ops[0].b
	if aLen == 0 {
		aStart--
	}
	if bLen == 0 {
		bStart--
	}
	fmt.Fprintf(out, "@@ -%d,%d +%d,%d @@\n", aStart, aLen, bStart, bLen)
	for _, op := range ops {
		out.WriteByte(op.kind)
		out.WriteString(op.line)
		out.WriteByte('\n')
	}
}

// splitLines splits text into lines, without their line ends.
func splitLines(text string) []string {
	var lines []string
	for line := range strings.Lines(text) {
		lines = append(lines, strings.TrimSuffix(line, "\n"))
	}
	return lines
}

// editScript is a shortest edit script from a to b: the lines they share at both ends kept, and between them a
// longest common subsequence. An object's YAML changes in few places, so the table between the ends stays small.
func editScript(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	// lcs[i][j] is the length of a longest common subsequence of ma[i:] and mb[j:].
	lcs := make([][]int32, len(ma)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(mb)+1)
	}
	for i := len(ma) - 1; i >= 0; i-- {
		for j := len(mb) - 1; j >= 0; j-- {
			if ma[i] == mb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	ops := make([]edit, 0, len(a)+len(b))
	for k := range pre {
		ops = append(ops, edit{' ', a[k], k + 1, k + 1})
	}
	i, j := 0, 0
	for i < len(ma) || j < len(mb) {
		switch {
		case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
			ops = append(ops, edit{' ', ma[i], pre + i + 1, pre + j + 1})
			i++
			j++
		case i < len(ma) && (j == len(mb) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, edit{'-', ma[i], pre + i + 1, pre + j + 1})
			i++
		default:
			ops = append(ops, edit{'+', mb[j], pre + i + 1, pre + j + 1})
			j++
		}
	}
	for k := range suf {
		ops = append(ops, edit{' ', a[len(a)-suf+k], len(a) - suf + k + 1, len(b) - suf + k + 1})
	}
	return ops
}
