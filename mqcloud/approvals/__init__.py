"""Applications and approvals: every change that touches the cluster is applied for,
approved (or auto-approved) by an admin, executed, and recorded in the audit trail."""
