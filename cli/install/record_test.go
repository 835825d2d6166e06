package install

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestWithRecorded: a flag given wins, a flag not given takes the recorded value, and with no record the
// defaults stay.
func TestWithRecorded(t *testing.T) {
	defaults := JoinOptions{DNS: DNSStandalone, TokenExpiration: 24 * time.Hour, Wait: time.Minute}
	record := map[string]string{
		FlagClusterID: "cluster-b", FlagDNS: DNSReplace, FlagControllerImage: "mirror/ctl:v2", FlagDNSImage: "mirror/dns:v2",
		FlagClusterDomain: "corp.example", FlagRegion: "eu-west", FlagTokenExpiration: "48h0m0s",
	}
	recorded := JoinOptions{ClusterID: "cluster-b", DNS: DNSReplace, ControllerImage: "mirror/ctl:v2", DNSImage: "mirror/dns:v2",
		ClusterDomain: "corp.example", Region: "eu-west", TokenExpiration: 48 * time.Hour, Wait: time.Minute}
	givenOnly := func(flags ...string) func(string) bool {
		return func(f string) bool {
			for _, g := range flags {
				if g == f {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name    string
		opts    JoinOptions
		record  map[string]string
		given   func(string) bool
		want    JoinOptions
		from    map[string]string
		wantErr string
	}{
		{name: "no record, nothing given: the defaults", opts: defaults, given: givenOnly(), want: defaults,
			from: map[string]string{FlagDNS: fromDefault, FlagClusterID: fromDefault}},
		{name: "recorded, nothing given: the record", opts: defaults, record: record, given: givenOnly(), want: recorded,
			from: map[string]string{FlagDNS: fromRecorded, FlagTokenExpiration: fromRecorded}},
		{name: "recorded, some given: those win",
			opts: JoinOptions{DNS: DNSClusterLocal, TokenExpiration: 24 * time.Hour, Region: "", Wait: time.Minute}, record: record,
			given: givenOnly(FlagDNS, FlagRegion),
			want: JoinOptions{ClusterID: "cluster-b", DNS: DNSClusterLocal, ControllerImage: "mirror/ctl:v2", DNSImage: "mirror/dns:v2",
				ClusterDomain: "corp.example", Region: "", TokenExpiration: 48 * time.Hour, Wait: time.Minute},
			from: map[string]string{FlagDNS: fromGiven, FlagRegion: fromGiven, FlagControllerImage: fromRecorded}},
		{name: "no Given: every option is given", opts: defaults, record: record, want: defaults,
			from: map[string]string{FlagDNS: fromGiven, FlagClusterID: fromGiven}},
		{name: "a record of fewer settings (an older release's)", opts: defaults, record: map[string]string{FlagDNS: DNSReplace}, given: givenOnly(),
			want: JoinOptions{DNS: DNSReplace, TokenExpiration: 24 * time.Hour, Wait: time.Minute},
			from: map[string]string{FlagDNS: fromRecorded, FlagControllerImage: fromDefault}},
		{name: "a recorded duration that is none", opts: defaults, record: map[string]string{FlagTokenExpiration: "a day"}, given: givenOnly(),
			wantErr: `mcs-system/mcs-join: token-expiration "a day"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, origins, err := withRecorded(tc.opts, tc.record, tc.given)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			if len(origins) != len(settings) {
				t.Errorf("%d origins, want one per setting", len(origins))
			}
			for _, o := range origins {
				if want, ok := tc.from[o.flag]; ok && o.from != want {
					t.Errorf("--%s from %s, want %s", o.flag, o.from, want)
				}
			}
		})
	}
}

func TestDescribeOrigins(t *testing.T) {
	origins := []origin{{FlagDNS, DNSReplace, fromGiven}, {FlagControllerImage, "mirror/ctl:v2", fromRecorded}, {FlagRegion, "", fromDefault}}
	got := describeOrigins(origins, map[string]string{FlagDNS: DNSStandalone})
	want := `given --dns="replace"; recorded --controller-image="mirror/ctl:v2"; default --region=""; the DNS mode was standalone: its objects stay (unjoin, then join, to remove them)`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := describeOrigins(origins[:1], nil); !strings.Contains(got, "no ConfigMap mcs-system/mcs-join") {
		t.Errorf("without a record: %s", got)
	}
}

// TestRecordRoundTrip: what join records, a join that is given no flag reads back as the same settings, and
// applies as the same record: the second join's dry run finds it unchanged.
func TestRecordRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := newFake()
	first := JoinOptions{ClusterID: "cluster-b", DNS: DNSReplace, ControllerImage: "mirror/ctl:v2", ClusterDomain: "corp.example",
		Region: "eu-west", TokenExpiration: 72 * time.Hour, Wait: time.Minute}
	if err := applyOne(ctx, &writer{Client: c, cluster: "member"}, recordObject(first), fieldOwner); err != nil {
		t.Fatal(err)
	}
	record, err := readRecord(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defaults := JoinOptions{DNS: DNSStandalone, TokenExpiration: 24 * time.Hour, Wait: time.Minute}
	second, _, err := withRecorded(defaults, record, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(second, first) {
		t.Errorf("read back %+v, recorded %+v", second, first)
	}
	p := &plan{}
	if err := applyOne(ctx, &writer{Client: c, cluster: "member", plan: p}, recordObject(second), fieldOwner); err != nil {
		t.Fatal(err)
	}
	if len(p.changes) != 1 || p.changes[0].what() != actionUnchanged {
		t.Errorf("the second join's record: %+v, want unchanged", p.changes)
	}
	if record, err := readRecord(ctx, newFake()); err != nil || record != nil {
		t.Errorf("a member without a record: %v, %v", record, err)
	}
}
