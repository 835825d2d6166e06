package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/cli/install"
)

// defaultBrokerInfo is where broker init writes the broker-info file and join, unjoin read it.
const defaultBrokerInfo = "broker-info.yaml"

func (o *options) brokerCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "broker", Short: "Prepare the clusterset's broker"}
	var opts install.InitOptions
	var file string
	initCmd := &cobra.Command{
		Use:   "init --clusterset NAME [--context BROKER]",
		Short: "Install the CRDs and roles members need on the broker (any API server), and write the broker-info file join reads",
		Long: `init applies build/deploy/broker (the mcs-api CRDs, the members' reader and writer roles, and the joiner identity)
to the API server of --context, and writes the broker-info file: the broker's URL and CA, the clusterset's name and
the joiner's token. The file is a credential: join, unjoin and rotate use it to give members their identity on the
broker, and take it away. Running init again changes nothing on the broker and writes a new token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.ClusterSet == "" {
				return fmt.Errorf("--clusterset is required: the name every member's clusterset.k8s.io ClusterProperty will hold")
			}
			cfg, err := o.oneCluster("the broker")
			if err != nil {
				return err
			}
			info, err := install.BrokerInit(cmd.Context(), cfg, opts, o.streams.Out)
			if err != nil {
				return err
			}
			if err := info.Write(file); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.streams.Out, "wrote %s: keep it like a kubeconfig; next, for each member: kubectl mcs join --context MEMBER --broker-info %s\n", file, file)
			return err
		},
	}
	f := initCmd.Flags()
	f.StringVar(&opts.ClusterSet, "clusterset", "", "the clusterset's name")
	f.StringVar(&opts.Server, "server", "", "the broker's URL as members reach it; default the kubeconfig's")
	f.DurationVar(&opts.TokenExpiration, "token-expiration", 7*24*time.Hour, "how long the joiner's token lasts (run init again for a new one)")
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the broker-info file to write")
	cmd.AddCommand(initCmd)
	return cmd
}

func (o *options) joinCommand() *cobra.Command {
	var opts install.JoinOptions
	var file string
	cmd := &cobra.Command{
		Use:   "join --broker-info FILE [--context MEMBER] [--cluster-id ID]",
		Short: "Make the cluster of --context a member: cluster id, broker identity and credentials, CRDs, controller, admission policy, DNS",
		Long: `join installs everything a member needs, in an order that works on a fresh cluster, and waits until the member's
controller renews its Lease on the broker. Running it again changes nothing (objects are applied server-side and
credentials the broker still accepts are kept). DNS modes (--dns):
  standalone     our CoreDNS as mcs-system/mcs-dns, serving clusterset.local only; the cluster's DNS forwards the
                 zone to it: a server block appended to CoreDNS's Corefile (or a kube-dns stub domain), and one in
                 NodeLocal DNSCache's where it runs. Nothing else of the cluster's DNS changes.
  replace        our CoreDNS in place of kube-dns (build/deploy/coredns), keeping the kube-dns Service.
  cluster-local  no DNS change: every import is also a cluster.local Service <svc>-clusterset.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, cfg, err := o.memberWith(file)
			if err != nil {
				return err
			}
			id, err := install.Join(cmd.Context(), cfg, info, opts, o.streams.Out)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.streams.Out, "joined %s to clusterset %s\n", id, info.ClusterSet)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the file `kubectl mcs broker init` wrote")
	f.StringVar(&opts.ClusterID, "cluster-id", "", "the member's cluster id; default its ClusterProperty's, else the kube-system namespace UID")
	f.DurationVar(&opts.TokenExpiration, "token-expiration", 24*time.Hour, "how long the member's broker token lasts; its controller renews it before then")
	f.StringVar(&opts.ControllerImage, "controller-image", "", "the mcs-controller image, for a mirror; default the release's")
	f.StringVar(&opts.DNSImage, "dns-image", "", "our CoreDNS image, for a mirror; default the release's")
	f.StringVar(&opts.DNS, "dns", install.DNSStandalone, "DNS mode: "+strings.Join(install.DNSModes, ", ")+` (see Long)`)
	f.DurationVar(&opts.Wait, "wait", 5*time.Minute, "how long to wait for the controller, DNS and the first Lease renewal")
	return cmd
}

func (o *options) unjoinCommand() *cobra.Command {
	var opts install.UnjoinOptions
	var file string
	cmd := &cobra.Command{
		Use:   "unjoin --broker-info FILE [--context MEMBER]",
		Short: "Take the cluster of --context out of the clusterset, on the member and the broker, and say what is left",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, cfg, err := o.memberWith(file)
			if err != nil {
				return err
			}
			return install.Unjoin(cmd.Context(), cfg, info, opts, o.streams.Out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the file `kubectl mcs broker init` wrote")
	f.StringVar(&opts.ClusterID, "cluster-id", "", "the member's cluster id; default its ClusterProperty's")
	f.DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for the controller to stop and the broker namespace to go")
	return cmd
}

// oneCluster is the config of the one cluster broker init, join and unjoin talk to through the kubeconfig: --context,
// as kubectl names it (the broker's address for members comes from the broker-info file). --broker-context, which
// status and diagnose read the broker through, would be ambiguous here, so it is refused.
func (o *options) oneCluster(what string) (*rest.Config, error) {
	if o.broker != "" {
		return nil, fmt.Errorf("--broker-context is for status, services and diagnose; name %s with --context", what)
	}
	return o.config.ToRESTConfig()
}

// memberWith reads the broker-info file and the member's config, for the commands that act on one member.
func (o *options) memberWith(brokerInfo string) (install.BrokerInfo, *rest.Config, error) {
	info, err := install.ReadBrokerInfo(brokerInfo)
	if err != nil {
		return info, nil, err
	}
	cfg, err := o.oneCluster("the member")
	return info, cfg, err
}

func (o *options) rotateCommand() *cobra.Command {
	var opts install.RotateOptions
	var file string
	cmd := &cobra.Command{
		Use:   "rotate --broker-info FILE [--context MEMBER] [--ca-only]",
		Short: "Give the member of --context a new broker token and revoke the old one once its controller uses the new",
		Long: `rotate writes a new token of the member's ServiceAccount on the broker, bound to a new Secret there, into the
member's Secret mcs-system/broker-kubeconfig. The controller switches to it without a restart; once the member's
broker Lease names the new credential, rotate deletes the Secret the old token was bound to, which revokes it.
With --ca-only, the member's kubeconfig takes the broker-info's server and CA bundle instead (after the broker's
serving certificate moved to another CA: run broker init again, or edit the broker-info, first) and keeps its
token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, cfg, err := o.memberWith(file)
			if err != nil {
				return err
			}
			return install.Rotate(cmd.Context(), cfg, info, opts, o.streams.Out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the file `kubectl mcs broker init` wrote")
	f.BoolVar(&opts.CAOnly, "ca-only", false, "write the broker-info's server and CA bundle into the member's kubeconfig, keeping its token")
	f.DurationVar(&opts.TokenExpiration, "token-expiration", 24*time.Hour, "how long the new token lasts; the controller renews it before then")
	f.DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for the controller to take the new credential")
	return cmd
}
