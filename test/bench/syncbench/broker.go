package main

import (
	"context"
	"encoding/json"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
)

// objects are the broker objects of one resource the controllers wrote: how many, and their size as the API
// server serves them in JSON, managedFields included. etcd keeps built-in types (EndpointSlices, Leases) in
// protobuf, somewhat smaller, and custom resources (ServiceImports) in this JSON.
type objects struct {
	Count int
	Bytes int64
}

// brokerKinds are the resources the controllers write on the broker (package broker).
var brokerKinds = map[string]schema.GroupVersionKind{
	"serviceimports": mcsv1beta1.SchemeGroupVersion.WithKind("ServiceImportList"),
	"endpointslices": discoveryv1.SchemeGroupVersion.WithKind("EndpointSliceList"),
	"leases":         coordinationv1.SchemeGroupVersion.WithKind("LeaseList"),
}

// brokerObjects counts and sizes the controllers' objects on the broker, by resource, a page at a time.
func brokerObjects(ctx context.Context, c client.Client) (map[string]objects, error) {
	all := map[string]objects{}
	for resource, gvk := range brokerKinds {
		var o objects
		cont := ""
		for {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk)
			err := c.List(ctx, list, client.MatchingLabelsSelector{Selector: broker.Selector}, client.Limit(500), client.Continue(cont))
			if err != nil {
				return nil, err
			}
			for _, item := range list.Items {
				b, err := json.Marshal(item.Object)
				if err != nil {
					return nil, err
				}
				o.Count++
				o.Bytes += int64(len(b))
			}
			if cont = list.GetContinue(); cont == "" {
				break
			}
		}
		all[resource] = o
	}
	return all, nil
}
