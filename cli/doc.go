// Package cli is the kubectl-mcs plugin's commands. root.go builds the command tree and options.go the flags
// every subcommand shares; each subcommand has its file (status.go, services.go, diagnose.go, export.go,
// unexport.go, broker.go, join.go, unjoin.go, rotate.go, version.go), with its cobra command and its pure view.
// The read commands take every member cluster of a clusterset and the broker into one Snapshot (collect.go, the
// only code that talks to API servers besides export.go, unexport.go and dns.go), and turn that plain data into
// the status table, the services matrix and the diagnose check list (checks_broker.go, checks_member.go,
// checks_service.go) with pure functions, so that what the operator sees is table-tested without clusters.
// Installing (broker init, join, unjoin, rotate) is package install's.
package cli
