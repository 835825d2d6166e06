// Command firstrun measures a newcomer's first `make demo`: it clones this repository's HEAD into a new folder and
// runs `make demo` there, as the README's quick start says, -clones times in a row, each in a fresh clone (no
// .cache/, no bin/). The first run has empty Go build and module caches of its own (GOCACHE, GOMODCACHE under the
// work folder), as on a machine that never built Go: every module comes through the module proxy and every
// package, the pinned Kubernetes' included, is compiled. The later runs share the caches the first one filled, as
// a newcomer's second clone would. Every run must pass; the figures are each run's wall time and outcome, written
// as Markdown to -out. `make bench-first-run` runs it (root: the demo's nodes need it).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	clones := flag.Int("clones", 5, "fresh clones to run `make demo` in, one after the other; the first with empty Go caches")
	out := flag.String("out", "test/bench/results/first-run.md", "results file (Markdown)")
	work := flag.String("work", "", "folder for the clones and the Go caches (default: a new temporary folder, removed at the end)")
	budget := flag.Duration("cold-budget", 20*time.Minute, "the first, cold run's allowed wall time (issue 40: 20 minutes on 2 cores)")
	flag.Parse()
	if err := run(*clones, *out, *work, *budget); err != nil {
		log.Fatal(err)
	}
}

// result is one clone's `make demo`.
type result struct {
	took   time.Duration
	cold   bool
	failed string // the last lines of its output, when it failed
}

func run(clones int, out, work string, budget time.Duration) error {
	if clones < 1 {
		return fmt.Errorf("-clones %d: want at least 1", clones)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	commit := strings.TrimSpace(string(head))
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	if work == "" {
		if work, err = os.MkdirTemp("", "first-run-"); err != nil {
			return err
		}
		// The module cache is read-only as Go writes it (without -modcacherw).
		defer func() { _ = exec.Command("chmod", "-R", "u+w", work).Run(); _ = os.RemoveAll(work) }()
	}
	caches := []string{"GOCACHE=" + filepath.Join(work, "gocache"), "GOMODCACHE=" + filepath.Join(work, "gomodcache")}
	var results []result
	for i := range clones {
		dir := filepath.Join(work, "clone-"+strconv.Itoa(i+1))
		if b, err := exec.Command("git", "clone", "--quiet", "--no-local", repo, dir).CombinedOutput(); err != nil {
			return fmt.Errorf("git clone: %v\n%s", err, b)
		}
		if b, err := exec.Command("git", "-C", dir, "checkout", "--quiet", commit).CombinedOutput(); err != nil {
			return fmt.Errorf("git checkout %s: %v\n%s", commit, err, b)
		}
		r := demo(dir, caches)
		r.cold = i == 0
		log.Printf("clone %d: make demo took %s, %s", i+1, r.took.Round(time.Second), outcome(r))
		results = append(results, r)
		// The clone's tools cache and bin/ are hundreds of MiB; the Go caches stay for the next run.
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.WriteFile(out, []byte(report(commit, results, budget)), 0o644); err != nil {
		return err
	}
	for i, r := range results {
		if r.failed != "" {
			return fmt.Errorf("clone %d: make demo failed:\n%s", i+1, r.failed)
		}
	}
	if results[0].took > budget {
		return fmt.Errorf("the cold make demo took %s, more than %s", results[0].took.Round(time.Second), budget)
	}
	return nil
}

// demo runs `make demo` in the clone dir with the Go caches env, and times it.
func demo(dir string, env []string) result {
	cmd := exec.Command("make", "demo")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	cmd.Stdout = io.MultiWriter(&buf, os.Stdout)
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	err := cmd.Run()
	r := result{took: time.Since(start)}
	if err != nil {
		r.failed = fmt.Sprintf("%v\n%s", err, tail(buf.String(), 40))
	}
	return r
}

func outcome(r result) string {
	if r.failed != "" {
		return "failed"
	}
	return "passed"
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// report renders the runs as Markdown.
func report(commit string, results []result, budget time.Duration) string {
	var b strings.Builder
	passed := 0
	for _, r := range results {
		if r.failed == "" {
			passed++
		}
	}
	fmt.Fprintf(&b, "# A newcomer's first `make demo` (`make bench-first-run`)\n\n")
	fmt.Fprintf(&b, "Written by test/bench/firstrun on %s at commit %s, on a %d-core machine: `make demo` in %d fresh clones "+
		"in a row (no .cache/, no bin/: each builds the tools the demo needs, our binaries and images, then runs the "+
		"demo). The first had empty Go build and module caches (every module through the module proxy, every package "+
		"compiled, the pinned Kubernetes included); the others shared the caches it filled. Budget of the cold run: %s.\n\n",
		time.Now().UTC().Format("2006-01-02"), commit[:12], runtime.NumCPU(), len(results), budget)
	fmt.Fprintf(&b, "| clone | Go caches | make demo, s | outcome |\n|---|---|---|---|\n")
	for i, r := range results {
		caches := "warm"
		if r.cold {
			caches = "empty"
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f | %s |\n", i+1, caches, r.took.Seconds(), outcome(r))
	}
	fmt.Fprintf(&b, "\n%d of %d passed.\n", passed, len(results))
	for i, r := range results {
		if r.failed != "" {
			fmt.Fprintf(&b, "\n## Clone %d failed\n\n```\n%s\n```\n", i+1, r.failed)
		}
	}
	return b.String()
}
