package datapath

import "fmt"

// WalkSessions is EachSession that stops when fn returns false: the daemon's sweep hands the
// table to its loop a step at a time (a million sessions read whole took ~280 MB, issue 28),
// and a walk the daemon abandons (it is ending) reads no further.
func (d *Datapath) WalkSessions(fn func(Session) bool) error {
	var setErr error
	if err := readUntil(d.objs.Sessions, func(k *ilnpBPFIlnpSessionKey, v *ilnpBPFIlnpSession) bool {
		set, err := d.remoteSet(*k, v)
		if err != nil && setErr == nil {
			setErr = err
		}
		return fn(sessionFromBPF(*k, v, set))
	}); err != nil {
		return fmt.Errorf("datapath: walk sessions: %w", err)
	}
	if setErr != nil {
		return fmt.Errorf("datapath: walk sessions: %w", setErr)
	}
	return nil
}
