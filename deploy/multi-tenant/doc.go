// Package multitenant generates a multi-tenant agentlog deployment (deploy/multi-tenant/README.md):
// one NATS account per tenant, each with its own AGENTLOG stream, buckets and services, and in each
// the users of the five roles (RolePermissions), TLS with a generated CA and client verification.
// Generate writes it; up.sh starts it. Its tests run up.sh for real and try every role's work and
// every cross-tenant attack against it (deploy/SECURITY.md).
package multitenant
