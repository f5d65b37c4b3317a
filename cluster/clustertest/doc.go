// Package clustertest starts in-process clusters on 127.0.0.1 for tests:
// members with the local preset's fast timings, a fixed test gossip key and
// logs that go to the test until it ends. node/ and the coordinator use it
// to test against real membership without processes.
//
//	cs := clustertest.Start(t, 3, nil) // three members that see each other
//	cs[2].Close()                      // and one that fails
//	clustertest.WaitState(t, cs[0], cs[2].Name(), cluster.StateFailed, 5*time.Second)
package clustertest
