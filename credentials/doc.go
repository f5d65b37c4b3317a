// Package credentials creates and loads the secrets of an acpp cluster: the
// cluster certificate authority (CA), node and client certificates issued by
// it, and the gossip key that encrypts memberlist traffic (C6).
//
// Every QUIC connection uses mutual TLS 1.3 with the cluster CA as the only
// root. A certificate names its holder in a URI SAN,
// acpp://<cluster>/<role>/<name>, with role "node", "client" or
// "operator" (a client that also sees every client's jobs in a node's
// status; [Identity.IsClient] is true for both);
// [Credentials.PeerIdentity] verifies a peer's chain and returns that
// [Identity], which the transport then checks against cluster membership.
//
// # Usage
//
// Once, on the operator's machine (acpp-node's credentials subcommand calls
// these, one function per action):
//
//	ca, err := credentials.CreateCA(dir, credentials.CAConfig{Cluster: "lab"})
//	_, err = credentials.CreateGossipKey(dir)
//	_, err = credentials.CreateNode(dir, "n1", credentials.IssueConfig{})
//	_, err = credentials.CreateClient(dir, "alice", credentials.IssueConfig{})
//	_, err = credentials.CreateOperator(dir, "ops", credentials.IssueConfig{})
//
// On each node, from the files copied there:
//
//	creds, err := credentials.LoadNode(dir, "n1")
//	srv := creds.ServerTLS()
//	key, err := credentials.LoadGossipKey(filepath.Join(dir, credentials.GossipKeyFile))
//
// # Directory layout
//
//	<dir>/ca.crt              the cluster CA certificate: copy to every node and client
//	<dir>/ca.key              the CA's private key (0600): needed only to issue; keep it off the nodes
//	<dir>/gossip.key          memberlist key, base64 of 32 random bytes (0600): every node
//	<dir>/nodes/<name>.crt    a node's certificate
//	<dir>/nodes/<name>.key    its private key (0600)
//	<dir>/clients/<name>.crt  a client's or an operator's certificate (a user or a job submitter)
//	<dir>/clients/<name>.key  its private key (0600)
//
// Private keys are written with mode 0600 and refused when readable by group
// or others. Existing files are never overwritten: remove them first to
// re-issue.
//
// # Errors
//
// Loaders wrap [ErrNotFound] when a file is missing, [ErrInsecureKey] for a
// key file others can read, and [ErrInvalid] for files that do not parse or
// do not belong together; creators wrap [ErrExists]. Peer checks return
// errors wrapping [ErrUntrusted].
package credentials
