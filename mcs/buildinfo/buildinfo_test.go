package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "vksfleet.dev/fleet", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "22e142b"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := From(bi, true), (Info{Version: "(devel)", Revision: "22e142b", Modified: true, GoVersion: "go1.26.0"}); got != want {
		t.Errorf("From = %+v, want %+v", got, want)
	}
	if got := From(nil, false); got.Version != "unknown" || got.GoVersion != "unknown" {
		t.Errorf("without build info: %+v", got)
	}
	// What build/images/build.sh links in wins over the build info.
	version, revision = "v0.1.0", "abc123-dirty"
	defer func() { version, revision = "", "" }()
	if got := From(bi, true); got.Version != "v0.1.0" || got.Revision != "abc123-dirty" {
		t.Errorf("with link-time values: %+v", got)
	}
}
