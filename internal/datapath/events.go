package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/cilium/ebpf/ringbuf"

	"ilnp/internal/wire"
)

// eventSize is sizeof(struct ilnp_event) in bpf/lib/maps.h.
const eventSize = 8 + 4 + 4 + 8 + 8 + 16 + 16

func decodeEvent(b []byte) (Event, error) {
	if len(b) < eventSize {
		return Event{}, fmt.Errorf("event of %d bytes, want %d", len(b), eventSize)
	}
	le := binary.LittleEndian
	return Event{
		Ns:        le.Uint64(b[0:]),
		Type:      EventType(le.Uint32(b[8:])),
		Ifindex:   int(le.Uint32(b[12:])),
		LocalNID:  wire.NID(binary.BigEndian.Uint64(b[16:])),
		RemoteNID: wire.NID(binary.BigEndian.Uint64(b[24:])),
		Src:       netip.AddrFrom16([16]byte(b[32:48])),
		Dst:       netip.AddrFrom16([16]byte(b[48:64])),
	}, nil
}

// Events streams the datapath's events until ctx ends or the Datapath is closed, then closes
// the channel. Only one reader may run at a time. After every session the datapath opened on its
// own it refills the nonce pool.
func (d *Datapath) Events(ctx context.Context) (<-chan Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reader != nil {
		return nil, errors.New("datapath: events are already being read")
	}
	rd, err := ringbuf.NewReader(d.objs.Events)
	if err != nil {
		return nil, fmt.Errorf("datapath: event reader: %w", err)
	}
	d.reader = rd
	out := make(chan Event, 64)
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
			d.mu.Lock()
			if d.reader == rd {
				d.reader = nil
			}
			d.mu.Unlock()
			close(done)
			close(out)
		}()
		for {
			rec, err := rd.Read()
			if err != nil {
				if !errors.Is(err, ringbuf.ErrClosed) {
					slog.Error("datapath events", "err", err)
				}
				return
			}
			ev, err := decodeEvent(rec.RawSample)
			if err != nil {
				slog.Warn("datapath events", "err", err)
				continue
			}
			switch ev.Type {
			case EventSessionResponder, EventSessionInitiator, EventNoncePoolEmpty:
				if _, err := d.RefillNonces(); err != nil {
					slog.Warn("datapath nonce pool", "err", err)
				}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
