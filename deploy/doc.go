// Package deploy holds the nats-server configurations for running agentlog (single-node.conf and
// cluster-3-node/n{1,2,3}.conf; see README.md). Its tests load every configuration with the server's
// own parser and run them with agentlog provisioned on top. It has no Go API.
package deploy
