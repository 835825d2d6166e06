package install

import "testing"

func TestWithBlock(t *testing.T) {
	const block = blockBegin + " (join)\nclusterset.local:53 {\n    forward . 10.0.0.9\n}\n" + blockEnd + "\n"
	const other = blockBegin + " (join)\nclusterset.local:53 {\n    forward . 10.0.0.7\n}\n" + blockEnd + "\n"
	const stock = ".:53 {\n    errors\n}\n"
	for _, tc := range []struct {
		name, corefile, want string
		changed              bool
	}{
		{"appended", stock, stock + block, true},
		{"appended after a last line without newline", ".:53 {\n}", ".:53 {\n}\n" + block, true},
		{"already there", stock + block, stock + block, false},
		{"another address replaced", stock + other, stock + block, true},
		{"block in the middle replaced, lines after kept", stock + other + "# mine\n", stock + "# mine\n" + block, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := withBlock(tc.corefile, block)
			if got != tc.want || changed != tc.changed {
				t.Errorf("withBlock = %q, %v; want %q, %v", got, changed, tc.want, tc.changed)
			}
		})
	}
}

func TestWithoutBlock(t *testing.T) {
	const block = blockBegin + "\nx\n" + blockEnd + "\n"
	for _, tc := range []struct {
		name, corefile, want string
		removed              bool
	}{
		{"none", ".:53 {\n}\n", ".:53 {\n}\n", false},
		{"at the end", ".:53 {\n}\n" + block, ".:53 {\n}\n", true},
		{"end marker without newline", ".:53 {\n}\n" + blockBegin + "\nx\n" + blockEnd, ".:53 {\n}\n", true},
		{"in the middle", "a\n" + block + "b\n", "a\nb\n", true},
		{"no end marker: left alone", "a\n" + blockBegin + "\nb\n", "a\n" + blockBegin + "\nb\n", false},
		{"marker text inside a line is not a marker", "a # BEGIN vksfleet multicluster\n", "a # BEGIN vksfleet multicluster\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, removed := withoutBlock(tc.corefile)
			if got != tc.want || removed != tc.removed {
				t.Errorf("withoutBlock = %q, %v; want %q, %v", got, removed, tc.want, tc.removed)
			}
		})
	}
}
