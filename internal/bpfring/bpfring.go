// Package bpfring streams the records of a BPF ring buffer map to a channel, one reader at a
// time, for the datapaths that report to user space through one (the product's events, the
// lab's MIPv6 signalling tap).
package bpfring

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// ErrBusy is returned by Stream while another stream of the same Reader runs.
var ErrBusy = errors.New("already being read")

// Reader is the slot for the one running stream of a ring buffer. The zero value is ready.
type Reader struct {
	mu sync.Mutex
	rd *ringbuf.Reader
}

// Close ends the running stream, if any (its channel is then closed).
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rd == nil {
		return nil
	}
	err := r.rd.Close()
	r.rd = nil
	return err
}

// Stream reads the ring buffer m until ctx ends or r is closed, then closes the channel. Each
// record goes to decode, which also reports what it cannot use and answers false to skip it;
// what it returns with true is sent on the channel (while ctx lasts). A failing read is logged
// with name and ends the stream. A second stream of r while one runs gets ErrBusy; the
// ring buffer reader's own error is returned as it is, for the caller to wrap.
func Stream[T any](ctx context.Context, r *Reader, m *ebpf.Map, name string, decode func([]byte) (T, bool)) (<-chan T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rd != nil {
		return nil, ErrBusy
	}
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, err // the caller names the ring buffer
	}
	r.rd = rd
	out := make(chan T, 64)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		rd.Close()
	}()
	go func() {
		defer func() {
			r.mu.Lock()
			if r.rd == rd {
				r.rd = nil
			}
			r.mu.Unlock()
			close(done)
			close(out)
		}()
		for {
			rec, err := rd.Read()
			if err != nil {
				if !errors.Is(err, ringbuf.ErrClosed) {
					slog.Error(name, "err", err)
				}
				return
			}
			v, ok := decode(rec.RawSample)
			if !ok {
				continue
			}
			select {
			case out <- v:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
