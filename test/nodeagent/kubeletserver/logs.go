package kubeletserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// maxLogLine is where a long line is cut into partial lines, as containerd
// does, so that readers never need unbounded buffers.
const maxLogLine = 16 << 10

// Log files carry RFC 3339 timestamps of any precision, as containerd
// writes them, while the kubelet prints them to clients at fixed width.
const (
	timeFormatIn  = time.RFC3339Nano
	timeFormatOut = "2006-01-02T15:04:05.000000000Z07:00"
)

const (
	streamStdout = "stdout"
	streamStderr = "stderr"
	tagFull      = "F"
	tagPartial   = "P"
)

// openLogs maps each log file that a LogWriter of this process still
// writes to that writer, so that followers can wait for its lines and
// learn when it is finished. A file absent here gets no more lines.
var openLogs = struct {
	sync.Mutex
	files map[string]*logFile
}{files: map[string]*logFile{}}

// logFile is the state that a container's stdout and stderr writers share.
type logFile struct {
	key  string
	mu   sync.Mutex
	f    *os.File
	open int // writers not yet closed
	// changed is closed and replaced after each line, done once both
	// writers are closed; followers wait on both without polling.
	changed chan struct{}
	done    chan struct{}
}

// NewLogWriter creates or appends to the CRI-format log file at path (one
// per container run, which Runtime.LogFile then returns) and returns the
// writers for the container's stdout and stderr. They may be written
// concurrently. The file counts as finished, and `kubectl logs -f` on it
// ends, once both writers are closed; close them when the container has
// exited, before reporting it as such. Only one LogWriter may have a path
// open at a time.
func NewLogWriter(path string) (stdout, stderr io.WriteCloser, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	key, err := logKey(path)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	lf := &logFile{key: key, f: f, open: 2, changed: make(chan struct{}), done: make(chan struct{})}
	openLogs.Lock()
	defer openLogs.Unlock()
	if openLogs.files[key] != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("log file %s is already being written", path)
	}
	openLogs.files[key] = lf
	return &streamWriter{file: lf, stream: streamStdout}, &streamWriter{file: lf, stream: streamStderr}, nil
}

// logKey names a file the same way for its writer and its readers, however
// each of them spelled the path.
func logKey(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// watchLog returns the file's signals, or nil channels when no writer of
// this process has the file open any more.
func watchLog(key string) (changed, done <-chan struct{}) {
	openLogs.Lock()
	lf := openLogs.files[key]
	openLogs.Unlock()
	if lf == nil {
		return nil, nil
	}
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.changed, lf.done
}

// streamWriter turns one stream's bytes into CRI log lines.
type streamWriter struct {
	file    *logFile
	stream  string
	pending []byte // the stream's unfinished line
	closed  bool
}

// Write implements io.Writer.
func (w *streamWriter) Write(p []byte) (int, error) {
	lf := w.file
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if w.closed {
		return 0, os.ErrClosed
	}
	w.pending = append(w.pending, p...)
	for {
		if i := bytes.IndexByte(w.pending, '\n'); i >= 0 && i <= maxLogLine {
			if err := lf.appendLine(w.stream, tagFull, w.pending[:i]); err != nil {
				return 0, err
			}
			w.pending = w.pending[i+1:]
		} else if len(w.pending) > maxLogLine {
			if err := lf.appendLine(w.stream, tagPartial, w.pending[:maxLogLine]); err != nil {
				return 0, err
			}
			w.pending = w.pending[maxLogLine:]
		} else {
			break
		}
	}
	return len(p), nil
}

// Close flushes an unfinished line as a partial one; the second of the
// two writers to close finishes the file.
func (w *streamWriter) Close() error {
	lf := w.file
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	var err error
	if len(w.pending) > 0 {
		err = lf.appendLine(w.stream, tagPartial, w.pending)
		w.pending = nil
	}
	lf.open--
	if lf.open > 0 {
		return err
	}
	err = errors.Join(err, lf.f.Close())
	openLogs.Lock()
	delete(openLogs.files, lf.key)
	openLogs.Unlock()
	close(lf.done)
	return err
}

// appendLine writes one line with a single write, so that readers see
// whole lines, and wakes the followers. lf.mu must be held.
func (lf *logFile) appendLine(stream, tag string, content []byte) error {
	line := make([]byte, 0, len(content)+64)
	line = time.Now().UTC().AppendFormat(line, timeFormatIn)
	line = fmt.Appendf(line, " %s %s ", stream, tag)
	line = append(line, content...)
	line = append(line, '\n')
	_, err := lf.f.Write(line)
	close(lf.changed)
	lf.changed = make(chan struct{})
	return err
}

// logLine is one decoded line of a CRI log file.
type logLine struct {
	time    time.Time
	stream  string
	partial bool // continued by the stream's next line
	content []byte
}

// parseLogLine decodes "<timestamp> <stream> <tags> <content>" (without
// the newline). Tags are colon-separated with the first one F or P; later
// ones are ignored, as the kubelet does for forward compatibility.
func parseLogLine(line []byte) (logLine, error) {
	fields := bytes.SplitN(line, []byte{' '}, 4)
	if len(fields) < 4 {
		return logLine{}, fmt.Errorf("log line %q has fewer than 4 fields", line)
	}
	t, err := time.Parse(timeFormatIn, string(fields[0]))
	if err != nil {
		return logLine{}, fmt.Errorf("log line timestamp: %w", err)
	}
	stream := string(fields[1])
	if stream != streamStdout && stream != streamStderr {
		return logLine{}, fmt.Errorf("log line stream %q is neither stdout nor stderr", stream)
	}
	tag, _, _ := bytes.Cut(fields[2], []byte{':'})
	if string(tag) != tagFull && string(tag) != tagPartial {
		return logLine{}, fmt.Errorf("log line tag %q is neither F nor P", fields[2])
	}
	return logLine{time: t, stream: stream, partial: string(tag) == tagPartial, content: fields[3]}, nil
}

// logOptions are the kubelet's containerLogs query parameters, parsed as
// the kube-apiserver writes them.
type logOptions struct {
	follow, previous, timestamps bool
	tailLines                    int64 // negative: all
	limitBytes                   int64 // negative: no limit
	since                        time.Time
	stream                       string // empty: both
}

func parseLogOptions(q url.Values, now time.Time) (logOptions, error) {
	o := logOptions{tailLines: -1, limitBytes: -1}
	var errs []error
	boolean := func(name string, dst *bool) {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			errs = append(errs, err)
			*dst = b
		}
	}
	integer := func(name string, lowest int64, dst *int64) bool {
		v := q.Get(name)
		if v == "" {
			return false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n < lowest {
			err = fmt.Errorf("%s must be at least %d", name, lowest)
		}
		errs = append(errs, err)
		*dst = n
		return true
	}
	boolean("follow", &o.follow)
	boolean("previous", &o.previous)
	boolean("timestamps", &o.timestamps)
	integer("tailLines", 0, &o.tailLines)
	integer("limitBytes", 1, &o.limitBytes)
	var sinceSeconds int64
	if integer("sinceSeconds", 1, &sinceSeconds) {
		o.since = now.Add(-time.Duration(sinceSeconds) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		if !o.since.IsZero() {
			errs = append(errs, errors.New("sinceSeconds and sinceTime are mutually exclusive"))
		}
		t, err := time.Parse(time.RFC3339, v)
		errs = append(errs, err)
		o.since = t
	}
	switch v := q.Get("stream"); v {
	case "", "All":
	case "Stdout":
		o.stream = streamStdout
	case "Stderr":
		o.stream = streamStderr
	default:
		errs = append(errs, fmt.Errorf("invalid stream %q", v))
	}
	return o, errors.Join(errs...)
}

func (s *Server) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	opts, err := parseLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path, err := s.rt.LogFile(r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container"), opts.previous)
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	key, err := logKey(path)
	if errors.Is(err, os.ErrNotExist) {
		err = fmt.Errorf("log file %s: %w", path, ErrNotFound)
	}
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	f, err := os.Open(key)
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	defer f.Close()
	start, err := tailStart(f, opts.tailLines)
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		writeRuntimeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rc := http.NewResponseController(w)
	out := &logOutput{w: w, opts: opts, remain: opts.limitBytes, atLineStart: true}
	if out.remain < 0 {
		out.remain = math.MaxInt64
	}
	lines := int64(math.MaxInt64)
	if opts.tailLines >= 0 && !opts.follow {
		// The file may grow while it is read; the tail is what it held at
		// the start.
		lines = opts.tailLines
	}
	in := &lineReader{r: bufio.NewReader(f)}
	changed, done := watchLog(key)
	for {
		for lines > 0 {
			line, err := in.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
			lines--
			if l, err := parseLogLine(line); err == nil {
				if more, err := out.write(l); !more || err != nil {
					_ = rc.Flush()
					return
				}
			}
		}
		// Flushing whenever the file is drained shows followers each line
		// as it comes without a flush per line on long logs.
		if rc.Flush() != nil || lines == 0 || !opts.follow || done == nil {
			return
		}
		select {
		case <-changed:
			changed, done = watchLog(key)
		case <-done:
			// Everything written is now in the file: read to its end once
			// more, then stop.
			changed, done = nil, nil
		case <-r.Context().Done():
			return
		}
	}
}

// tailStart returns the offset of the first of the file's last n lines,
// counting the file's lines as the kubelet does (a partial line is one).
func tailStart(f *os.File, n int64) (int64, error) {
	info, err := f.Stat()
	if n < 0 || err != nil {
		return 0, err
	}
	size := info.Size()
	if n == 0 {
		return size, nil
	}
	buf := make([]byte, 32<<10)
	var seen int64
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			// The file's last newline ends its last line rather than
			// starting one.
			if b[i] != '\n' || start+int64(i) == size-1 {
				continue
			}
			if seen++; seen == n {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}

// lineReader returns the file's complete lines and keeps an unfinished one
// until the rest of it has been written.
type lineReader struct {
	r       *bufio.Reader
	pending []byte
}

// next returns the next line without its newline, valid until the next
// call, or io.EOF when no complete line is left yet.
func (lr *lineReader) next() ([]byte, error) {
	if len(lr.pending) > 0 && lr.pending[len(lr.pending)-1] == '\n' {
		lr.pending = lr.pending[:0]
	}
	for {
		chunk, err := lr.r.ReadSlice('\n')
		lr.pending = append(lr.pending, chunk...)
		switch err {
		case nil:
			return lr.pending[:len(lr.pending)-1], nil
		case bufio.ErrBufferFull:
		default:
			return nil, err
		}
	}
}

// logOutput writes decoded lines to the client as the kubelet does.
type logOutput struct {
	w           io.Writer
	opts        logOptions
	remain      int64 // bytes left under limitBytes
	atLineStart bool
}

// write reports whether more lines may follow, false once limitBytes is
// used up.
func (o *logOutput) write(l logLine) (bool, error) {
	lineStart := o.atLineStart
	o.atLineStart = !l.partial
	if l.time.Before(o.opts.since) || (o.opts.stream != "" && l.stream != o.opts.stream) {
		return true, nil
	}
	var b []byte
	// A line cut into partial ones gets a single timestamp.
	if o.opts.timestamps && lineStart {
		b = l.time.AppendFormat(b, timeFormatOut)
		b = append(b, ' ')
	}
	b = append(b, l.content...)
	if !l.partial {
		b = append(b, '\n')
	}
	if int64(len(b)) > o.remain {
		b = b[:o.remain]
	}
	n, err := o.w.Write(b)
	o.remain -= int64(n)
	return o.remain > 0, err
}
