package config

import (
	"slices"
	"strings"
)

// reloadable are the keys ilnpd applies on SIGHUP without a restart: they change policy and
// timers, not what the daemon has attached, bound or published.
var reloadable = map[string]bool{
	"handoff":                 true,
	"policy":                  true,
	"log-level":               true,
	"hosts":                   true, // re-read; adding or removing the file needs a restart
	"lu-initial-timeout":      true,
	"lu-max-timeout":          true,
	"lu-max-attempts":         true,
	"session-idle-timeout":    true,
	"new-sessions-per-second": true,
	"tcp-aware":               true,
}

// Diff compares two configurations key by key (as Format writes them) and returns the keys
// whose values differ, sorted, split into those a running ilnpd can apply and those that need
// a restart.
func Diff(old, new Config) (apply, restart []string) {
	before, after := old.Values(), new.Values()
	var changed []string
	for k, v := range after {
		if before[k] != v {
			changed = append(changed, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			changed = append(changed, k)
		}
	}
	slices.Sort(changed)
	for _, k := range changed {
		if reloadable[k] && (k != "hosts" || (old.HostsFile != "" && new.HostsFile != "")) {
			apply = append(apply, k)
		} else {
			restart = append(restart, k)
		}
	}
	return apply, restart
}

// Values is the configuration as key -> value, every key explicit, as Format writes them.
func (c Config) Values() map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(c.Format()), "\n") {
		k, v, _ := strings.Cut(line, " ")
		out[k] = v
	}
	return out
}
