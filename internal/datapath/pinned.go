package datapath

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// OpenPinned opens the maps a running datapath pinned in pinDir, without loading or attaching
// programs: for tools like ilnpctl that show sessions, peers, locators and counters, or change
// them, beside the daemon that owns the datapath. Attach is refused and Close leaves the pins.
// Nonce sizes for PutSession come from the pinned configuration.
func OpenPinned(pinDir string) (*Datapath, error) {
	d := &Datapath{opts: Options{PinDir: pinDir, KeepPinned: true}, openedPinned: true}
	m := &d.objs.ilnpBPFMaps
	for name, dst := range map[string]**ebpf.Map{
		ilnpBPFMapConfigMap: &m.ConfigMap, ilnpBPFMapCounters: &m.Counters, ilnpBPFMapEvents: &m.Events,
		ilnpBPFMapLocalLocators: &m.LocalLocators, ilnpBPFMapLocalNids: &m.LocalNids,
		ilnpBPFMapNoncePool: &m.NoncePool, ilnpBPFMapPeers: &m.Peers,
		ilnpBPFMapSessions: &m.Sessions, ilnpBPFMapRemoteMore: &m.RemoteMore,
		// PutSession keeps the flags these two maps call for (sessionflags.go).
		ilnpBPFMapMultipath: &m.Multipath, ilnpBPFMapUnverified: &m.Unverified,
	} {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
		if err != nil {
			d.objs.Close()
			return nil, fmt.Errorf("datapath: open pinned map %s in %s: %w", name, pinDir, err)
		}
		*dst = mp
	}
	cfg, err := d.config()
	if err != nil {
		d.objs.Close()
		return nil, err
	}
	d.opts.NonceSize = int(cfg.NonceLen)
	return d, nil
}

var errPinnedOnly = errors.New("datapath: opened from pinned maps, no programs to attach")
