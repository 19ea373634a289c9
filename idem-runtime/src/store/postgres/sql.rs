//! The SQL of the PostgreSQL store's operations (see the module documentation of
//! [`super`]).

/// The statements, with the schema name spliced in once.
pub(super) struct Statements {
    pub(super) claim: String,
    pub(super) read_live: String,
    pub(super) take_over: String,
    pub(super) complete: String,
    pub(super) release: String,
    pub(super) collect_some: String,
    pub(super) collect_all: String,
}

impl Statements {
    pub(super) fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        let row = "fingerprint, created_at, expires_at, owner, lease_until, outcome, completed_at";
        Statements {
            claim: format!(
                "WITH live AS (
                    SELECT {row} FROM {s}.records WHERE key = $1 AND expires_at > $3
                 ),
                 ins AS (
                    INSERT INTO {s}.records AS r
                        (key, fingerprint, created_at, expires_at, owner, lease_until)
                    SELECT $1::TEXT, $2::TEXT, $3::BIGINT, $4::BIGINT, $5::TEXT, $6::BIGINT
                    WHERE NOT EXISTS (SELECT 1 FROM live)
                    ON CONFLICT (key) DO UPDATE SET
                        fingerprint = EXCLUDED.fingerprint,
                        created_at = EXCLUDED.created_at,
                        expires_at = EXCLUDED.expires_at,
                        owner = EXCLUDED.owner,
                        lease_until = EXCLUDED.lease_until,
                        outcome = NULL,
                        completed_at = NULL
                    WHERE r.expires_at <= $3
                    RETURNING 1
                 )
                 SELECT TRUE AS acquired, NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::TEXT,
                        NULL::BIGINT, NULL::TEXT, NULL::BIGINT
                 FROM ins
                 UNION ALL
                 SELECT FALSE, {row} FROM live WHERE NOT EXISTS (SELECT 1 FROM ins)"
            ),
            read_live: format!(
                "SELECT FALSE, {row} FROM {s}.records WHERE key = $1 AND expires_at > $2"
            ),
            take_over: format!(
                "UPDATE {s}.records SET owner = $1, lease_until = $2, created_at = $3, expires_at = $4
                 WHERE key = $5 AND owner = $6 AND lease_until = $7 AND expires_at > $3"
            ),
            complete: format!(
                "UPDATE {s}.records
                 SET owner = NULL, lease_until = NULL, outcome = $1, completed_at = $2
                 WHERE key = $3 AND owner = $4 AND expires_at > $2"
            ),
            release: format!("DELETE FROM {s}.records WHERE key = $1 AND owner = $2"),
            collect_some: format!(
                "DELETE FROM {s}.records WHERE key IN
                    (SELECT key FROM {s}.records WHERE expires_at <= $1 LIMIT $2)
                 AND expires_at <= $1"
            ),
            collect_all: format!("DELETE FROM {s}.records WHERE expires_at <= $1"),
        }
    }
}
