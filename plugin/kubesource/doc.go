// Package kubesource feeds a zone.Index from one cluster's Kubernetes API: ServiceImports (v1beta1, or
// v1alpha1 on servers that lack it), the imported EndpointSlices (those labelled
// multicluster.kubernetes.io/service-name, of the managers it is told to serve) and Namespaces. The informers
// transform every object into a slim one of this package, already parsed, and keep nothing else: no index, and
// no Kubernetes object; the slices are filed by service as they arrive. Every change marks its service dirty, and
// one worker rebuilds the dirty services' index entries in batches.
package kubesource
