package node

import "time"

// pollLateness remembers how late the path polls ran against when the tracker wanted them: a
// verdict's time since the pair's last delivery is the protocol's rule (RTT + margin) plus
// whatever the host added by running the polls late (the timer, the loop, the poll's share of
// it on a loaded machine). The verdict's event carries the latter (timeline.Event.Late), so
// that a reader, and the netns tests, can tell the two apart.
type pollLateness struct {
	due  time.Time // when the next poll is wanted; zero: not known
	ring [16]lateRecord
	next int
}

type lateRecord struct {
	at   time.Time
	late time.Duration
}

// want records when the tracker wants the next poll.
func (p *pollLateness) want(due time.Time) { p.due = due }

// ran records a poll that began its pass at now.
func (p *pollLateness) ran(now time.Time) {
	var late time.Duration
	if !p.due.IsZero() && now.After(p.due) {
		late = now.Sub(p.due)
	}
	p.due = time.Time{}
	p.ring[p.next%len(p.ring)] = lateRecord{at: now, late: late}
	p.next++
}

// since is what the host may have added to a verdict of the poll recorded last whose episode
// began at from: that poll's lateness, and the largest of the polls before it since from (the
// one that sent the suspect probe the verdict waits for). A verdict's delay is at most the
// two.
func (p *pollLateness) since(from time.Time) time.Duration {
	if p.next == 0 {
		return 0
	}
	last := p.ring[(p.next-1)%len(p.ring)]
	var earlier time.Duration
	for i := 2; i <= min(p.next, len(p.ring)); i++ {
		r := p.ring[(p.next-i)%len(p.ring)]
		if r.at.Before(from) {
			break
		}
		earlier = max(earlier, r.late)
	}
	return last.late + earlier
}
