package brokercreds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"vksfleet.dev/fleet/mcs/brokercred"
)

// Source is where the broker kubeconfig lives: a file or a Secret of the member cluster.
type Source interface {
	// Run calls deliver with the kubeconfig's content each time it changes, or with why there is none (missing,
	// unreadable), until ctx ends. Calls may come from more than one goroutine.
	Run(ctx context.Context, deliver func(kubeconfig []byte, err error))
	// Write replaces the kubeconfig with next if it still holds prev; ErrReplaced if it holds something else.
	Write(ctx context.Context, prev, next []byte) error
	// String names the source for logs and errors.
	String() string
}

// ErrReplaced is Source.Write's error when the kubeconfig no longer holds the credential that was renewed: an
// operator replaced it meanwhile, and their credential wins.
var ErrReplaced = errors.New("the broker kubeconfig was replaced meanwhile")

// FileSource is a kubeconfig file, read every Interval. Reading the content by its path, rather than watching the
// file, also follows the kubelet's swap of the `..data` symlink of a mounted Secret or ConfigMap.
type FileSource struct {
	Path     string
	Interval time.Duration
}

// Run reads the file at once and then every Interval, delivering what changed.
func (s *FileSource) Run(ctx context.Context, deliver func([]byte, error)) {
	ticker := time.NewTicker(s.Interval)
	defer ticker.Stop()
	var last []byte
	var lastErr string
	first := true
	for {
		data, err := os.ReadFile(s.Path)
		switch {
		case err != nil && (first || err.Error() != lastErr):
			deliver(nil, fmt.Errorf("reading the broker kubeconfig %s: %w", s.Path, err))
			last, lastErr = nil, err.Error()
		case err == nil && (first || lastErr != "" || !bytes.Equal(data, last)):
			deliver(data, nil)
			last, lastErr = data, ""
		}
		first = false
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Write replaces the file atomically: a temporary file in the same directory, renamed over it, so that no reader
// ever sees half a kubeconfig.
func (s *FileSource) Write(_ context.Context, prev, next []byte) error {
	cur, err := os.ReadFile(s.Path)
	if err != nil {
		return fmt.Errorf("reading the broker kubeconfig %s: %w", s.Path, err)
	}
	if !bytes.Equal(cur, prev) {
		return ErrReplaced
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.Path), "."+filepath.Base(s.Path)+".")
	if err != nil {
		return fmt.Errorf("writing the broker kubeconfig %s: %w (with a read-only file, such as a mounted Secret, use --broker-secret)", s.Path, err)
	}
	_, err = tmp.Write(next)
	err = errors.Join(err, tmp.Chmod(0o600), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), s.Path)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("writing the broker kubeconfig %s: %w", s.Path, err), os.Remove(tmp.Name()))
	}
	return nil
}

func (s *FileSource) String() string { return "file " + s.Path }

// SecretSource is the key "kubeconfig" of a Secret in the member cluster, watched by name: the list and watch
// carry the field selector metadata.name, which lets RBAC restrict them to this Secret with resourceNames.
type SecretSource struct {
	Client kubernetes.Interface
	Key    types.NamespacedName
}

// Run watches the Secret until ctx ends.
func (s *SecretSource) Run(ctx context.Context, deliver func([]byte, error)) {
	secrets := s.Client.CoreV1().Secrets(s.Key.Namespace)
	byName := fields.OneTermEqualSelector("metadata.name", s.Key.Name).String()
	// Streaming lists (WatchList) where the client supports them, as client-go's generated informers decide.
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			return secrets.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			return secrets.Watch(ctx, opts)
		},
	}, s.Client)
	seen := func(obj any) {
		secret, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		data, ok := secret.Data[brokercred.SecretKey]
		if !ok {
			deliver(nil, fmt.Errorf("secret %s has no key %q", s.Key, brokercred.SecretKey))
			return
		}
		deliver(data, nil)
	}
	store, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Secret{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    seen,
			UpdateFunc: func(_, obj any) { seen(obj) },
			DeleteFunc: func(any) { deliver(nil, fmt.Errorf("secret %s was deleted", s.Key)) },
		},
	})
	go func() {
		// An informer of a missing Secret delivers nothing: say so once its first list is in.
		syncCtx, cancel := context.WithTimeout(ctx, listPatience)
		defer cancel()
		if cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
			if _, exists, _ := store.GetByKey(s.Key.String()); !exists {
				deliver(nil, fmt.Errorf("secret %s not found: create it with the key %q holding the broker kubeconfig", s.Key, brokercred.SecretKey))
			}
			return
		}
		if ctx.Err() == nil {
			s.readOnce(ctx, informer.HasSynced, seen, deliver)
		}
	}()
	informer.RunWithContext(ctx)
}

// listPatience is how long the watch may take to list the Secret before a direct read says why it cannot.
const listPatience = 10 * time.Second

// readOnce reads the Secret directly, for a watch that cannot list it: the read either says why (forbidden,
// unreachable), or, where RBAC grants only get (a Role from before rotation was watched), still starts the
// controller, while the reflector keeps logging that it may not list.
func (s *SecretSource) readOnce(ctx context.Context, synced func() bool, seen func(any), deliver func([]byte, error)) {
	secret, err := s.Client.CoreV1().Secrets(s.Key.Namespace).Get(ctx, s.Key.Name, metav1.GetOptions{})
	switch {
	case synced():
		// The watch caught up meanwhile and delivers what it has, which may be newer than this read.
	case err != nil:
		deliver(nil, fmt.Errorf("reading secret %s (the controller needs get, list and watch on it): %w", s.Key, err))
	default:
		seen(secret)
	}
}

// Write updates the Secret with next if it still holds prev, re-reading it after a conflict.
func (s *SecretSource) Write(ctx context.Context, prev, next []byte) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		secret, err := s.Client.CoreV1().Secrets(s.Key.Namespace).Get(ctx, s.Key.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading secret %s: %w", s.Key, err)
		}
		if !bytes.Equal(secret.Data[brokercred.SecretKey], prev) {
			return ErrReplaced
		}
		secret.Data[brokercred.SecretKey] = next
		_, err = s.Client.CoreV1().Secrets(s.Key.Namespace).Update(ctx, secret, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("updating secret %s: %w", s.Key, err)
		}
		return err
	})
}

func (s *SecretSource) String() string { return "secret " + s.Key.String() }
