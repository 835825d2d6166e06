package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// writer is the client join writes one cluster through. Its applies take over no field that another field manager
// set to another value, unless force, or takeOver for that object, says so: such a conflict fails the apply,
// naming each field and its manager. In a dry run (plan set) it changes nothing: each apply, update and create,
// join's only writes, runs as a server-side dry run, and what it would do is added to the plan.
type writer struct {
	client.Client
	// cluster is "member" or "broker", as the plan names it.
	cluster string
	force   bool
	// takeOver holds the objects (objectKey) applied with force in any case.
	takeOver map[string]bool
	plan     *plan
}

// objectKey names an object by kind, namespace and name.
func objectKey(o *unstructured.Unstructured) string { return o.GetKind() + " " + objectName(o) }

// Apply applies obj, an unstructured object (as applyOne passes it), with the writer's force, or as a dry run.
func (w *writer) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	u, ok := obj.(runtime.Unstructured)
	if !ok {
		return fmt.Errorf("join applies unstructured objects, not %T", obj)
	}
	o := &unstructured.Unstructured{Object: u.UnstructuredContent()}
	applyOpts := (&client.ApplyOptions{}).ApplyOptions(opts)
	applyOpts.Force = ptr.To(w.force || w.takeOver[objectKey(o)])
	if w.plan == nil {
		err := w.Client.Apply(ctx, obj, applyOpts)
		if fields, ok := conflicts(err); ok {
			return &conflictError{fields: fields, err: err}
		}
		return err
	}
	c := change{cluster: w.cluster, kind: o.GetKind(), name: objectName(o)}
	desired := normalize(runtime.DeepCopyJSON(o.Object))
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(o.GroupVersionKind())
	err := w.Client.Get(ctx, client.ObjectKeyFromObject(o), live)
	switch {
	case meta.IsNoMatchError(err):
		// Of a kind that a CRD join applies before brings: the API server cannot try it yet.
		c.after, c.action, c.note = desired, actionCreated, "its CRD is created first"
		w.plan.add(c)
		return nil
	case err == nil:
		c.before = normalize(live.Object)
	case !apierrors.IsNotFound(err):
		return err
	}
	applyOpts.DryRun = []string{metav1.DryRunAll}
	err = w.Client.Apply(ctx, obj, applyOpts)
	if fields, ok := conflicts(err); ok {
		c.action, c.note = actionConflict, fields
		w.plan.add(c)
		return nil
	}
	if apierrors.IsNotFound(err) && w.plan.creates(w.cluster, o.GetNamespace()) {
		c.after, c.action, c.note = desired, actionCreated, "in a namespace join creates first"
		w.plan.add(c)
		return nil
	}
	if err != nil {
		return err
	}
	// The API server's answer replaced the object's content.
	c.after = normalize(u.UnstructuredContent())
	w.plan.add(c)
	return nil
}

// Update updates obj, or in a dry run adds to the plan what the update would change.
func (w *writer) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if w.plan == nil {
		return w.Client.Update(ctx, obj, opts...)
	}
	live, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%T is no client.Object", obj)
	}
	if err := w.Client.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return err
	}
	if err := w.Client.Update(ctx, obj, append(opts, client.DryRunAll)...); err != nil {
		return err
	}
	return w.planned(live, obj)
}

// Create creates obj, or in a dry run adds to the plan that it would be created.
func (w *writer) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if w.plan == nil {
		return w.Client.Create(ctx, obj, opts...)
	}
	if err := w.Client.Create(ctx, obj, append(opts, client.DryRunAll)...); err != nil {
		return err
	}
	return w.planned(nil, obj)
}

// planned adds to the plan the change of a typed object from live (nil when absent) to after.
func (w *writer) planned(live, after client.Object) error {
	gvk, err := apiutil.GVKForObject(after, w.Scheme())
	if err != nil {
		return err
	}
	c := change{cluster: w.cluster, kind: gvk.Kind, name: objectName(after)}
	if live != nil {
		if c.before, err = runtime.DefaultUnstructuredConverter.ToUnstructured(live); err != nil {
			return err
		}
		c.before = normalize(c.before)
	}
	if c.after, err = runtime.DefaultUnstructuredConverter.ToUnstructured(after); err != nil {
		return err
	}
	c.after = normalize(c.after)
	w.plan.add(c)
	return nil
}

// dryRun says whether c is a writer in a dry run.
func dryRun(c client.Client) bool {
	w, ok := c.(*writer)
	return ok && w.plan != nil
}

// conflicts describes an apply's conflicts with other field managers: each field, and the manager that set it to
// another value; false for any other error.
func conflicts(err error) (string, bool) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Reason != metav1.StatusReasonConflict || status.Status().Details == nil {
		return "", false
	}
	var fields []string
	for _, c := range status.Status().Details.Causes {
		if c.Type == metav1.CauseTypeFieldManagerConflict {
			fields = append(fields, fmt.Sprintf("%s (%s)", c.Field, c.Message))
		}
	}
	if len(fields) == 0 {
		return "", false
	}
	return "another field manager set " + strings.Join(fields, ", "), true
}

// conflictError is an apply refused for conflicts with other field managers.
type conflictError struct {
	fields string
	err    error
}

func (e *conflictError) Error() string {
	return e.fields + ": join changed nothing of this object; give those fields the values join applies (--dry-run shows them), " +
		"or run join again with --force-conflicts to take them over, as `kubectl apply --server-side --force-conflicts` does"
}

func (e *conflictError) Unwrap() error { return e.err }

// replacedDNS are the objects (objectKey) of build/deploy/coredns: the replace DNS mode takes over the cluster's
// DNS objects of those names whoever set them up, since replacing them is what the mode is asked for.
func replacedDNS() (map[string]bool, error) {
	objs, err := rendered("coredns")
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, o := range objs {
		keys[objectKey(o)] = true
	}
	return keys, nil
}

// plan collects what a dry run of join would change on the member and the broker, one entry per object. A nil
// plan, a run's that is no dry run, records nothing.
type plan struct {
	changes []change
	// index finds an object's entry by cluster and objectKey.
	index map[string]int
}

// add adds a change to the plan. A second write of the same object (the member directory entry, by two field
// managers) adds its change to the first's: the dry run of each saw the live object, not the other's result.
func (p *plan) add(c change) {
	if p == nil {
		return
	}
	if p.index == nil {
		p.index = map[string]int{}
	}
	key := c.cluster + " " + c.kind + " " + c.name
	i, seen := p.index[key]
	if !seen {
		p.index[key] = len(p.changes)
		p.changes = append(p.changes, c)
		return
	}
	prev := &p.changes[i]
	switch {
	case c.action == actionConflict:
		prev.action, prev.note = c.action, c.note
	case prev.after != nil && c.after != nil:
		prev.after = mergeChange(prev.after, prev.before, c.after)
	}
}

// applied says how a step applied objects: for real, or, with a plan, as a dry run whose changes the plan lists.
func (p *plan) applied() string {
	if p == nil {
		return "applied"
	}
	return "dry run (changes listed below)"
}

// creates says whether the plan creates the namespace ns of cluster.
func (p *plan) creates(cluster, ns string) bool {
	i, ok := p.index[cluster+" Namespace "+ns]
	return ok && p.changes[i].what() == actionCreated
}

// finish prints the plan, and fails if an apply would conflict with another field manager, as join would stop
// there.
func (p *plan) finish(out io.Writer) error {
	if p == nil {
		return nil
	}
	if err := renderPlan(out, p.changes); err != nil {
		return err
	}
	n := 0
	for _, c := range p.changes {
		if c.what() == actionConflict {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("%d objects conflict with other field managers (listed above): join would stop at the first; give those fields the values join applies, or join with --force-conflicts to take them over", n)
	}
	return nil
}
