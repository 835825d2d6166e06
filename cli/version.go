package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/discovery"

	"vksfleet.dev/fleet/mcs/buildinfo"
	"vksfleet.dev/fleet/mcs/mcsversion"
)

// VersionInfo is what `kubectl mcs version` prints: the plugin's build, and the mcs-api version the broker serves.
type VersionInfo struct {
	// Version is the plugin's module version: a tag for `go install ...@vX`, "(devel)" when built from a checkout.
	Version string `json:"version"`
	// Revision is the git commit it was built from, when the build recorded it; Modified says the tree had
	// uncommitted changes.
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	// Broker is the broker's side; absent when the broker could not be resolved or reached (BrokerError says why).
	Broker      *BrokerVersion `json:"broker,omitempty"`
	BrokerError string         `json:"brokerError,omitempty"`
}

// BrokerVersion is what the broker serves.
type BrokerVersion struct {
	Context string `json:"context"`
	// MCSAPI is the mcs-api group version the broker serves ServiceImports in (mcsversion.Detect).
	MCSAPI     string `json:"mcsAPI"`
	Kubernetes string `json:"kubernetes"`
}

// buildVersion is the plugin's side of VersionInfo.
func buildVersion(bi buildinfo.Info) VersionInfo {
	return VersionInfo{Version: bi.Version, Revision: bi.Revision, Modified: bi.Modified, GoVersion: bi.GoVersion}
}

func (v VersionInfo) text() string {
	revision := v.Revision
	switch {
	case revision == "":
		revision = "unknown"
	case v.Modified:
		revision += " (modified)"
	}
	out := fmt.Sprintf("kubectl-mcs %s\ngit revision %s\n%s\n", v.Version, revision, v.GoVersion)
	if v.Broker != nil {
		out += fmt.Sprintf("broker %s: Kubernetes %s, mcs-api %s\n", v.Broker.Context, v.Broker.Kubernetes, v.Broker.MCSAPI)
	} else {
		out += fmt.Sprintf("broker: %s\n", v.BrokerError)
	}
	return out
}

func (o *options) versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "The plugin's version, git revision and Go version, and the mcs-api version the broker serves",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if o.output != "" {
				if err := validateOutput(o.output); err != nil || o.output == outputWide {
					return fmt.Errorf("version prints text, json or yaml, not -o %s", o.output)
				}
			}
			v := buildVersion(buildinfo.Read())
			// The broker's side is extra: the plugin's version prints without a broker, as kubectl version
			// --client would.
			if b, err := o.brokerVersion(); err != nil {
				v.BrokerError = err.Error()
			} else {
				v.Broker = b
			}
			if o.output == "" {
				_, err := fmt.Fprint(o.streams.Out, v.text())
				return err
			}
			return print(o.streams.Out, o.output, nil, v)
		},
	}
	o.addOutput(cmd)
	return cmd
}

func (o *options) brokerVersion() (*BrokerVersion, error) {
	_, name, cfg, _, err := o.brokerOf(contextProbeTimeout)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	sv, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("context %s: %w", name, err)
	}
	gv, err := mcsversion.Detect(dc)
	if err != nil {
		return nil, fmt.Errorf("context %s: %w", name, err)
	}
	return &BrokerVersion{Context: name, MCSAPI: gv.String(), Kubernetes: sv.GitVersion}, nil
}
