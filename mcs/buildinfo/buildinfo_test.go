package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "22e142b"}, {Key: "vcs.modified", Value: "true"}}
	build := func(version string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "vksfleet.dev/fleet", Version: version}, Settings: vcs}
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		// linked are the link-time version and revision (build/images/build.sh, the Makefile).
		linked [2]string
		want   Info
	}{{
		name: "a checkout without link-time values: no image matches",
		bi:   build("(devel)"),
		want: Info{Version: "(devel)", Revision: "22e142b", Modified: true, GoVersion: "go1.26.0"},
	}, {
		name: "no build info",
		want: Info{Version: "unknown", GoVersion: "unknown"},
	}, {
		name: "go install of a release",
		bi:   build("v1.2.3"),
		want: Info{Version: "v1.2.3", Revision: "22e142b", Modified: true, GoVersion: "go1.26.0", ImageTag: "v1.2.3"},
	}, {
		name: "go install of a release candidate",
		bi:   build("v1.3.0-rc.1"),
		want: Info{Version: "v1.3.0-rc.1", Revision: "22e142b", Modified: true, GoVersion: "go1.26.0", ImageTag: "v1.3.0-rc.1"},
	}, {
		name: "go install of a commit: a pseudo-version, which no image is tagged with",
		bi:   build("v0.0.0-20261128091059-b35ea41c0ffe"),
		want: Info{Version: "v0.0.0-20261128091059-b35ea41c0ffe", Revision: "22e142b", Modified: true, GoVersion: "go1.26.0"},
	}, {
		name: "go build's version from a modified git tree: not a tag",
		bi:   build("v1.2.4-0.20261128091059-b35ea41c0ffe+dirty"),
		want: Info{Version: "v1.2.4-0.20261128091059-b35ea41c0ffe+dirty", Revision: "22e142b", Modified: true, GoVersion: "go1.26.0"},
	}, {
		name:   "link-time values win over the build info, and tag the images",
		bi:     build("(devel)"),
		linked: [2]string{"v0.2.0-3-gb35ea41-dirty", "b35ea41c0ffe-dirty"},
		want:   Info{Version: "v0.2.0-3-gb35ea41-dirty", Revision: "b35ea41c0ffe-dirty", Modified: true, GoVersion: "go1.26.0", ImageTag: "v0.2.0-3-gb35ea41-dirty"},
	}, {
		name:   "a linked version before any tag: the commit",
		bi:     build("(devel)"),
		linked: [2]string{"b35ea41", "b35ea41c0ffe"},
		want:   Info{Version: "b35ea41", Revision: "b35ea41c0ffe", Modified: true, GoVersion: "go1.26.0", ImageTag: "b35ea41"},
	}, {
		name:   "a linked version that is no image tag",
		bi:     build("v1.2.3"),
		linked: [2]string{"release/1.0", ""},
		want:   Info{Version: "release/1.0", Revision: "22e142b", Modified: true, GoVersion: "go1.26.0"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			version, revision = tc.linked[0], tc.linked[1]
			defer func() { version, revision = "", "" }()
			if got := From(tc.bi, tc.bi != nil); got != tc.want {
				t.Errorf("From = %+v\nwant   %+v", got, tc.want)
			}
		})
	}
}
