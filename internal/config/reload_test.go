package config

import (
	"slices"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	parse := func(text string) Config {
		t.Helper()
		c, err := Parse(strings.NewReader(text), "t.conf")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	base := "interfaces a b\nhosts /etc/ilnp/hosts\n"
	cases := []struct {
		name          string
		old, new      string
		apply, restar []string
	}{
		{"same", base, base + "# a comment\n", nil, nil},
		{"defaults made explicit", base, base + "handoff soft\nlu-max-attempts 7\n", nil, nil},
		{"policy and timers", base, base + "handoff hard\npolicy preference\nlu-initial-timeout 200ms\nsession-idle-timeout 1m\nnew-sessions-per-second 0\nlog-level debug\n",
			[]string{"handoff", "log-level", "lu-initial-timeout", "new-sessions-per-second", "policy", "session-idle-timeout"}, nil},
		{"hosts file moved", base, "interfaces a b\nhosts /srv/hosts\n", []string{"hosts"}, nil},
		{"hosts file added", "interfaces a b\n", base, nil, []string{"hosts"}},
		{"attachments and identity", base, "interfaces a c\nhosts /etc/ilnp/hosts\nnid 0214:4fff:fe20:ee64\nnonce-size 12\nhandoff hard\n",
			[]string{"handoff"}, []string{"interfaces", "mtu-headroom", "nid", "nonce-size"}},
	}
	for _, c := range cases {
		apply, restart := Diff(parse(c.old), parse(c.new))
		if !slices.Equal(apply, c.apply) || !slices.Equal(restart, c.restar) {
			t.Errorf("%s: apply %q restart %q, want %q and %q", c.name, apply, restart, c.apply, c.restar)
		}
	}
}
