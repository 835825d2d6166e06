package kubeletserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseLogLine(t *testing.T) {
	ts := time.Date(2016, 10, 6, 0, 17, 9, 669794202, time.UTC)
	for _, tc := range []struct {
		line    string
		want    logLine
		wantErr bool
	}{
		{line: "2016-10-06T00:17:09.669794202Z stdout F log content 1", want: logLine{time: ts, stream: "stdout", content: []byte("log content 1")}},
		{line: "2016-10-06T00:17:09.669794202Z stderr P partial ", want: logLine{time: ts, stream: "stderr", partial: true, content: []byte("partial ")}},
		{line: "2016-10-06T00:17:09.669794202Z stdout F ", want: logLine{time: ts, stream: "stdout", content: []byte{}}},
		{line: "2016-10-06T00:17:09.669794202Z stdout P:x:y tags after the first are ignored", want: logLine{time: ts, stream: "stdout", partial: true, content: []byte("tags after the first are ignored")}},
		{line: "2016-10-06T02:17:09.669794202+02:00 stdout F zoned", want: logLine{time: ts, stream: "stdout", content: []byte("zoned")}},
		{line: "2016-10-06T00:17:09Z stdout F  two  spaces kept ", want: logLine{time: ts.Truncate(time.Second), stream: "stdout", content: []byte(" two  spaces kept ")}},
		{line: "2016-10-06T00:17:09.669794202Z stdout F", wantErr: true},
		{line: "2016-10-06 stdout F x", wantErr: true},
		{line: "2016-10-06T00:17:09.669794202Z stdin F x", wantErr: true},
		{line: "2016-10-06T00:17:09.669794202Z stdout X x", wantErr: true},
		{line: `{"log":"docker json is not CRI","stream":"stdout"}`, wantErr: true},
		{line: "", wantErr: true},
	} {
		got, err := parseLogLine([]byte(tc.line))
		if tc.wantErr {
			if err == nil {
				t.Errorf("parseLogLine(%q) = %+v, want an error", tc.line, got)
			}
			continue
		}
		if err != nil || !got.time.Equal(tc.want.time) || got.stream != tc.want.stream || got.partial != tc.want.partial || string(got.content) != string(tc.want.content) {
			t.Errorf("parseLogLine(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
}

type rawLine struct{ stream, tag, content string }

// readRawLines parses every line of a log file, failing on any it cannot.
func readRawLines(t *testing.T, path string) []rawLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("log file does not end with a newline: %q", data)
	}
	var lines []rawLine
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if l == "" {
			continue
		}
		parsed, err := parseLogLine([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		tag := "F"
		if parsed.partial {
			tag = "P"
		}
		lines = append(lines, rawLine{parsed.stream, tag, string(parsed.content)})
	}
	return lines
}

func TestLogWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	stdout, stderr, err := NewLogWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewLogWriter(path); err == nil {
		t.Error("a second writer for an open log file was allowed")
	}
	long := strings.Repeat("x", maxLogLine)
	for _, w := range []struct {
		to   io.Writer
		data string
	}{
		{stdout, "one\ntw"},
		{stderr, "err"},
		{stdout, "o\n\nthree"},
		{stderr, "or\n"},
		{stdout, "\n" + long + "\n"},
		{stdout, long + "yz\n"},
		{stdout, "unfinished"},
		{stderr, "unfinished too"},
	} {
		if n, err := io.WriteString(w.to, w.data); n != len(w.data) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w.data, n, err)
		}
	}
	if err := stdout.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdout, "late"); err == nil {
		t.Error("Write after Close succeeded")
	}
	if err := stderr.Close(); err != nil {
		t.Fatal(err)
	}
	want := []rawLine{
		{"stdout", "F", "one"},
		{"stdout", "F", "two"},
		{"stdout", "F", ""},
		{"stderr", "F", "error"},
		{"stdout", "F", "three"},
		{"stdout", "F", long},
		{"stdout", "P", long},
		{"stdout", "F", "yz"},
		{"stdout", "P", "unfinished"},
		{"stderr", "P", "unfinished too"},
	}
	if got := readRawLines(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("log lines:\n got %.200q\nwant %.200q", got, want)
	}
	stdout, stderr, err = NewLogWriter(path)
	if err != nil {
		t.Fatalf("reopening a finished log file: %v", err)
	}
	stdout.Close()
	stderr.Close()
}

func TestLogWriterConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	stdout, stderr, err := NewLogWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	const lines = 500
	var wg sync.WaitGroup
	for _, w := range []struct {
		to   io.WriteCloser
		name string
	}{{stdout, "out"}, {stderr, "err"}} {
		wg.Go(func() {
			defer w.to.Close()
			var all strings.Builder
			for i := range lines {
				fmt.Fprintf(&all, "%s line %d %s\n", w.name, i, strings.Repeat("=", i%37))
			}
			// Odd-sized writes cut lines anywhere.
			for s := all.String(); s != ""; {
				n := min(len(s), 7+len(s)%13)
				if _, err := io.WriteString(w.to, s[:n]); err != nil {
					t.Error(err)
					return
				}
				s = s[n:]
			}
		})
	}
	wg.Wait()
	next := map[string]int{}
	for _, l := range readRawLines(t, path) {
		name := map[string]string{"stdout": "out", "stderr": "err"}[l.stream]
		i := next[l.stream]
		if want := fmt.Sprintf("%s line %d %s", name, i, strings.Repeat("=", i%37)); l.tag != "F" || l.content != want {
			t.Fatalf("%s line %d = %+v, want %q", l.stream, i, l, want)
		}
		next[l.stream]++
	}
	if next["stdout"] != lines || next["stderr"] != lines {
		t.Errorf("got %v lines, want %d of each", next, lines)
	}
}

const fixedLog = `garbage is skipped
2024-01-01T00:00:00.000000001Z stdout F one
2024-01-01T00:00:01Z stderr F two
2024-01-01T00:00:02.5Z stdout P thr
2024-01-01T00:00:02.6Z stdout F ee
2024-01-01T00:00:03Z stdout F four
`

func TestContainerLogs(t *testing.T) {
	dir := t.TempDir()
	current, previous := filepath.Join(dir, "1.log"), filepath.Join(dir, "0.log")
	if err := os.WriteFile(current, []byte(fixedLog), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(previous, []byte("2023-12-31T23:59:59Z stdout F before the restart\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, &fakeRuntime{logs: map[string]string{"main": current, "main/previous": previous}})
	for _, tc := range []struct {
		query string
		want  string
	}{
		{"", "one\ntwo\nthree\nfour\n"},
		{"timestamps=true", "2024-01-01T00:00:00.000000001Z one\n2024-01-01T00:00:01.000000000Z two\n2024-01-01T00:00:02.500000000Z three\n2024-01-01T00:00:03.000000000Z four\n"},
		{"tailLines=1", "four\n"},
		{"tailLines=4", "two\nthree\nfour\n"},
		{"tailLines=0", ""},
		{"tailLines=100", "one\ntwo\nthree\nfour\n"},
		{"limitBytes=6", "one\ntw"},
		{"sinceTime=2024-01-01T00:00:01Z", "two\nthree\nfour\n"},
		{"sinceSeconds=60", ""},
		{"stream=Stderr", "two\n"},
		{"stream=Stdout&tailLines=2", "ee\nfour\n"},
		{"previous=true", "before the restart\n"},
		{"previous=true&timestamps=true", "2023-12-31T23:59:59.000000000Z before the restart\n"},
		// Nothing writes these files, so following them ends at once.
		{"follow=true", "one\ntwo\nthree\nfour\n"},
		{"follow=true&tailLines=1", "four\n"},
	} {
		status, body := ts.get(t, "/containerLogs/default/pod/main?"+tc.query)
		if status != http.StatusOK || body != tc.want {
			t.Errorf("?%s: %d %q, want %q", tc.query, status, body, tc.want)
		}
	}
}

// follow streams a container's log and returns a reader of the lines the
// server sends.
func follow(t *testing.T, ts *testServer, query string) *bufio.Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.base+"/containerLogs/default/pod/main?follow=true&"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return bufio.NewReader(resp.Body)
}

func expectLine(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	got, err := r.ReadString('\n')
	if err != nil || got != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

func TestContainerLogsFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	stdout, stderr, err := NewLogWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, &fakeRuntime{logs: map[string]string{"main": path}})
	fmt.Fprintln(stdout, "before the request")
	fmt.Fprintln(stdout, "also before")
	r := follow(t, ts, "tailLines=1&timestamps=true")

	got, err := r.ReadString('\n')
	if err != nil || !strings.HasSuffix(got, " also before\n") {
		t.Fatalf("first line %q, %v; want the tail line", got, err)
	}
	if _, err := time.Parse(timeFormatOut, strings.TrimSuffix(got, " also before\n")); err != nil {
		t.Errorf("line %q has no timestamp: %v", got, err)
	}
	// Each line is written only after the previous one arrived, so only
	// following can deliver it.
	for i := range 3 {
		fmt.Fprintf(stderr, "appended %d\n", i)
		got, err := r.ReadString('\n')
		if want := fmt.Sprintf(" appended %d\n", i); err != nil || !strings.HasSuffix(got, want) {
			t.Fatalf("read %q, %v; want a line ending %q", got, err, want)
		}
	}
	fmt.Fprint(stdout, "last words")
	stderr.Close()
	stdout.Close()
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("follow did not end with the log: %v", err)
	}
	if !strings.HasSuffix(string(rest), " last words") {
		t.Errorf("after closing the writers got %q, want the flushed partial line", rest)
	}
}

func TestContainerLogsFollowEndsWithServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	stdout, stderr, err := NewLogWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	defer stdout.Close()
	ts := startServer(t, &fakeRuntime{logs: map[string]string{"main": path}})
	fmt.Fprintln(stdout, "hello")
	r := follow(t, ts, "")
	expectLine(t, r, "hello\n")
	ts.stop()
	// A clean end of the body shows that the handler returned rather
	// than having its connection cut.
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after the server stopped got %q, %v", rest, err)
	}
}
