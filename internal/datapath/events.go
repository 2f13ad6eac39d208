package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"ilnp/internal/bpfring"
	"ilnp/internal/wire"
)

// eventSize is sizeof(struct ilnp_event) in bpf/lib/maps.h.
const eventSize = 8 + 4 + 4 + 8 + 8 + 16 + 16 + 4 + 4

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
		MTU:       int(le.Uint32(b[64:])),
	}, nil
}

// Events streams the datapath's events until ctx ends or the Datapath is closed, then closes
// the channel. Only one reader may run at a time. After every session the datapath opened on its
// own it refills the nonce pool.
func (d *Datapath) Events(ctx context.Context) (<-chan Event, error) {
	out, err := bpfring.Stream(ctx, &d.events, d.objs.Events, "datapath events", func(b []byte) (Event, bool) {
		ev, err := decodeEvent(b)
		if err != nil {
			slog.Warn("datapath events", "err", err)
			return ev, false
		}
		switch ev.Type {
		case EventSessionResponder, EventSessionInitiator, EventNoncePoolEmpty:
			if _, err := d.RefillNonces(); err != nil {
				slog.Warn("datapath nonce pool", "err", err)
			}
		}
		return ev, true
	})
	switch {
	case errors.Is(err, bpfring.ErrBusy):
		return nil, errors.New("datapath: events are already being read")
	case err != nil:
		return nil, fmt.Errorf("datapath: event reader: %w", err)
	}
	return out, nil
}
