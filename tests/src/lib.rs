//! End-to-end tests that start real Troupe processes (several agents, server, Postgres, etcd);
//! the tests live in `tests/tests/`.
