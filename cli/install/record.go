package install

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/names"
)

// The join flags that shape what join installs, by name: join records their values in the member and takes them
// from there when run again without them.
const (
	FlagClusterID       = "cluster-id"
	FlagRegion          = "region"
	FlagDNS             = "dns"
	FlagControllerImage = "controller-image"
	FlagDNSImage        = "dns-image"
	FlagClusterDomain   = "cluster-domain"
	FlagTokenExpiration = "token-expiration"
)

// recordName is the ConfigMap of controllerNamespace that holds the settings a member was joined with, one key per
// flag. A ConfigMap rather than annotations on the Namespace: the Namespace is the controller base's, which an
// overlay, Helm or GitOps may own, while the record is join's alone; and a ConfigMap's keys read plainly (`kubectl
// -n mcs-system get configmap mcs-join -o yaml`). It lives and goes with the namespace: unjoin deletes it, and the
// next join starts from the defaults.
const recordName = "mcs-join"

// setting is one recorded flag of JoinOptions.
type setting struct {
	flag string
	get  func(JoinOptions) string
	set  func(*JoinOptions, string) error
}

// settings are the recorded flags, in the order join prints them.
var settings = []setting{
	{FlagClusterID, func(o JoinOptions) string { return o.ClusterID }, func(o *JoinOptions, v string) error { o.ClusterID = v; return nil }},
	{FlagDNS, func(o JoinOptions) string { return o.DNS }, func(o *JoinOptions, v string) error { o.DNS = v; return nil }},
	{FlagControllerImage, func(o JoinOptions) string { return o.ControllerImage }, func(o *JoinOptions, v string) error { o.ControllerImage = v; return nil }},
	{FlagDNSImage, func(o JoinOptions) string { return o.DNSImage }, func(o *JoinOptions, v string) error { o.DNSImage = v; return nil }},
	{FlagClusterDomain, func(o JoinOptions) string { return o.ClusterDomain }, func(o *JoinOptions, v string) error { o.ClusterDomain = v; return nil }},
	{FlagRegion, func(o JoinOptions) string { return o.Region }, func(o *JoinOptions, v string) error { o.Region = v; return nil }},
	{FlagTokenExpiration, func(o JoinOptions) string { return o.TokenExpiration.String() }, func(o *JoinOptions, v string) error {
		d, err := time.ParseDuration(v)
		o.TokenExpiration = d
		return err
	}},
}

// Where a setting's value came from.
const (
	fromGiven    = "given"
	fromRecorded = "recorded"
	fromDefault  = "default"
)

// origin is one setting's value and where it came from.
type origin struct {
	flag, value, from string
}

// withRecorded returns opts with each setting the user did not give (given says whether they gave a flag; nil
// means every flag was given) taken from record, the member's recorded settings (nil when it has none), and
// where each setting's value came from. A flag given wins over the record, and is recorded in its place.
func withRecorded(opts JoinOptions, record map[string]string, given func(flag string) bool) (JoinOptions, []origin, error) {
	origins := make([]origin, 0, len(settings))
	for _, s := range settings {
		from := fromDefault
		v, recorded := record[s.flag]
		switch {
		case given == nil || given(s.flag):
			from = fromGiven
		case recorded:
			if err := s.set(&opts, v); err != nil {
				return opts, nil, fmt.Errorf("ConfigMap %s/%s: %s %q: %w (correct it, or delete the key and give --%s)", controllerNamespace, recordName, s.flag, v, err, s.flag)
			}
			from = fromRecorded
		}
		origins = append(origins, origin{s.flag, s.get(opts), from})
	}
	return opts, origins, nil
}

// describeOrigins says which settings join runs with, grouped by where they came from, and warns when the DNS
// mode is not the one recorded: join installs the new mode's objects and leaves the old one's.
func describeOrigins(origins []origin, record map[string]string) string {
	byFrom := map[string][]string{}
	for _, o := range origins {
		byFrom[o.from] = append(byFrom[o.from], fmt.Sprintf("--%s=%q", o.flag, o.value))
	}
	var parts []string
	for _, from := range []string{fromGiven, fromRecorded, fromDefault} {
		if len(byFrom[from]) > 0 {
			parts = append(parts, from+" "+strings.Join(byFrom[from], " "))
		}
	}
	did := strings.Join(parts, "; ")
	if len(record) == 0 {
		did += fmt.Sprintf(" (no ConfigMap %s/%s: joined by an earlier release, or not yet)", controllerNamespace, recordName)
	}
	for _, o := range origins {
		if was := record[FlagDNS]; o.flag == FlagDNS && was != "" && was != o.value {
			did += fmt.Sprintf("; the DNS mode was %s: its objects stay (unjoin, then join, to remove them)", was)
		}
	}
	return did
}

// readRecord returns the member's recorded settings, nil when it has none.
func readRecord(ctx context.Context, c client.Reader) (map[string]string, error) {
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: recordName}, &cm)
	if err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return cm.Data, nil
}

// recordObject is the record of opts, to apply with the member's manifests.
func recordObject(opts JoinOptions) *unstructured.Unstructured {
	data := map[string]any{}
	for _, s := range settings {
		data[s.flag] = s.get(opts)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"namespace": controllerNamespace, "name": recordName,
			"labels": map[string]any{names.LabelManagedBy: fieldOwner},
		},
		"data": data,
	}}
}
