// Package buildinfo says which build a binary of ours is: its version, git revision and Go version, which
// `kubectl mcs version` prints and the controller exports as mcs_controller_build_info, and the tag of our images
// of the same build, which `kubectl mcs join` installs.
package buildinfo

import (
	"regexp"
	"runtime/debug"
)

// version and revision, when set with -ldflags -X (the Makefile and build/images/build.sh set both, from
// build/images/version.sh), win over the build info: built from a checkout, the module version is "(devel)", and
// under GOFLAGS=-buildvcs=false the vcs settings are left out.
var version, revision string

// Info is a binary's build.
type Info struct {
	// Version is the module version: a tag for `go install ...@vX`, "(devel)" when built from a checkout, or the
	// version the build linked in (`git describe` of the tree).
	Version string
	// Revision is the git commit, when the build recorded it; Modified says the tree had uncommitted changes.
	Revision  string
	Modified  bool
	GoVersion string
	// ImageTag is the tag of our images of the same build: the version linked in, which build/images/build.sh
	// tags them with, or a release's module version (`go install ...@v1.2.3`). It is "" for a build that no
	// image matches: "(devel)", a pseudo-version (`go install ...@<commit>`, or go build's from the git state).
	ImageTag string
}

// Read returns this binary's build.
func Read() Info { return From(debug.ReadBuildInfo()) }

// From reads a build from the results of debug.ReadBuildInfo: the module version and the vcs settings that go
// build records from a git checkout, overridden by the values set at link time.
func From(bi *debug.BuildInfo, ok bool) Info {
	i := Info{Version: "unknown", GoVersion: "unknown"}
	if ok {
		i.Version, i.GoVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
		if releaseRe.MatchString(i.Version) && !pseudoRe.MatchString(i.Version) {
			i.ImageTag = i.Version
		}
	}
	if version != "" {
		i.Version, i.ImageTag = version, ""
		if tagRe.MatchString(version) {
			i.ImageTag = version
		}
	}
	if revision != "" {
		i.Revision = revision
	}
	return i
}

var (
	// tagRe is the grammar of an image tag (the OCI distribution spec's).
	tagRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	// releaseRe is a module version that can be an image tag: SemVer without build metadata ("+dirty").
	releaseRe = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
	// pseudoRe ends every pseudo-version: the commit's time and its 12-digit hash.
	pseudoRe = regexp.MustCompile(`[0-9]{14}-[0-9a-f]{12}$`)
)
