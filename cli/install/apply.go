package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/build/deploy"
)

// fieldOwner is the field manager of everything kubectl mcs applies, as kubectl's is "kubectl".
const fieldOwner = "kubectl-mcs"

// rendered decodes the objects a folder of build/deploy renders (deploy.Render).
func rendered(dir string) ([]*unstructured.Unstructured, error) {
	manifests, err := deploy.Render(dir)
	if err != nil {
		return nil, err
	}
	return decode(manifests)
}

// decode splits rendered manifests into objects.
func decode(manifests []byte) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := d.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decoding manifests: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// apply applies objects server-side, as applyOne does. CustomResourceDefinitions go first, and are waited for
// until established (but in a dry run, which creates none), so that objects of their kinds that follow can be
// applied.
func apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	var crds, rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		} else {
			rest = append(rest, o)
		}
	}
	for _, o := range crds {
		if err := applyOne(ctx, c, o, fieldOwner); err != nil {
			return err
		}
	}
	for i := 0; i < len(crds) && !dryRun(c); i++ {
		if err := waitEstablished(ctx, c, crds[i].GetName()); err != nil {
			return err
		}
	}
	for _, o := range rest {
		if err := applyOne(ctx, c, o, fieldOwner); err != nil {
			return err
		}
	}
	return nil
}

// applyOne applies o server-side as the field manager owner, taking over fields another manager set (as `kubectl
// apply --server-side --force-conflicts` does), unless c is join's writer, which decides that itself: broker init,
// and what the test fleets give the broker, apply objects that are kubectl mcs's alone.
func applyOne(ctx context.Context, c client.Client, o *unstructured.Unstructured, owner string) error {
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", o.GetKind(), objectName(o), err)
	}
	return nil
}

// objectName is namespace/name, or name for a cluster-scoped object.
func objectName(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// waitEstablished waits until the CRD serves its kinds.
func waitEstablished(ctx context.Context, c client.Client, name string) error {
	return waitFor(ctx, time.Minute, func() error {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("CRD %s is not established", name)
	})
}

// waitFor calls check every 200 ms until it returns nil, and fails with check's last error after timeout.
func waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("after %v: %w", timeout, last)
	}
	return err
}
