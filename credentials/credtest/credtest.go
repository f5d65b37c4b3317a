// Package credtest makes complete credential directories for tests: a
// cluster CA, the gossip key, and certificates for the named nodes and
// clients, laid out as credentials.LoadNode and LoadClient expect.
package credtest

import (
	"fmt"

	"github.com/acpp/acpp/credentials"
)

// Create fills dir (which must not hold credentials yet) with a CA for
// cluster, a gossip key, and one certificate per node and client name.
func Create(dir, cluster string, nodes, clients []string) error {
	if _, err := credentials.CreateCA(dir, credentials.CAConfig{Cluster: cluster}); err != nil {
		return err
	}
	if _, err := credentials.CreateGossipKey(dir); err != nil {
		return err
	}
	for _, n := range nodes {
		if _, err := credentials.CreateNode(dir, n, credentials.IssueConfig{}); err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
	}
	for _, c := range clients {
		if _, err := credentials.CreateClient(dir, c, credentials.IssueConfig{}); err != nil {
			return fmt.Errorf("client %s: %w", c, err)
		}
	}
	return nil
}
