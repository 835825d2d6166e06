// Package cli is the logic of the kubectl-mcs plugin: it reads every member cluster of a clusterset and the
// broker into one Snapshot (collect.go, the only code that talks to API servers besides export.go and dns.go),
// and turns that plain data into the status table, the services matrix and the diagnose check list with pure
// functions, so that what the operator sees is table-tested without clusters.
package cli
