//! What the server says of its tools (`tools/list`): which are read-only, which arguments
//! each takes; and the check of the configuration against it (contract Y2, Y4).

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use super::config::{Config, ToolPlan};

/// One listed tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedTool {
    /// `annotations.readOnlyHint` is `true`.
    pub read_only: bool,
    /// The names of `inputSchema.properties`; `None` when the schema lists none.
    pub properties: Option<BTreeSet<String>>,
}

/// The most pages one listing reads: a server whose cursors never end lists no more.
pub const MAX_PAGES: usize = 1000;

/// The server's tools, from every page of one listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolTable {
    tools: HashMap<String, ListedTool>,
    /// The cursors followed so far: a server whose cursors come round again (A, B, A…)
    /// has been read whole.
    cursors: BTreeSet<String>,
}

impl ToolTable {
    /// Adds the tools of one `tools/list` result page; returns the cursor of the next page
    /// to read: its `nextCursor`, unless that was followed before in this listing (a cycle)
    /// or [`MAX_PAGES`] are read.
    pub fn add_page(&mut self, result: &Map<String, Value>) -> Option<String> {
        for tool in result
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let read_only = tool
                .pointer("/annotations/readOnlyHint")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let properties = tool
                .pointer("/inputSchema/properties")
                .and_then(Value::as_object)
                .map(|properties| properties.keys().cloned().collect());
            self.tools.insert(
                name.to_owned(),
                ListedTool {
                    read_only,
                    properties,
                },
            );
        }
        let next = result.get("nextCursor").and_then(Value::as_str)?;
        if self.cursors.len() + 1 >= MAX_PAGES || !self.cursors.insert(next.to_owned()) {
            tracing::warn!(
                cursor = next,
                pages = self.cursors.len() + 1,
                "the server's tools/list cursor repeats or never ends: the listing stops here"
            );
            return None;
        }
        Some(next.to_owned())
    }

    /// How a call of `tool` is handled under `config` (Y2): keyed with a plan, or `None`
    /// (passed through). A name the listing does not have is keyed.
    pub fn plan(&self, config: &Config, tool: &str) -> Option<ToolPlan> {
        let read_only = self.tools.get(tool).is_some_and(|t| t.read_only);
        config.plan(tool, read_only)
    }

    /// The first thing `config` names that the server does not have (Y4): a tool it does not
    /// list, or a `key` member that is not a property of the tool's `inputSchema`.
    /// A tool the server annotates `readOnlyHint` is passed through unless the file says
    /// `keyed = true`, so a keyed call's setting for it (`require_approval`, `key`…) without
    /// that line is refused too: it would never apply.
    pub fn check(&self, config: &Config) -> Result<(), String> {
        for named in config.named_tools() {
            let (name, key) = (named.name, named.key);
            let Some(tool) = self.tools.get(name) else {
                let mut listed: Vec<&str> = self.tools.keys().map(String::as_str).collect();
                listed.sort_unstable();
                return Err(format!(
                    "the config names tool `{name}`, which the server does not list (it lists: {})",
                    if listed.is_empty() {
                        "no tools".to_owned()
                    } else {
                        listed.join(", ")
                    }
                ));
            };
            if let (true, None, Some(first)) =
                (tool.read_only, named.keyed, named.keyed_settings.first())
            {
                return Err(format!(
                    "the config's [tools.{name}] sets `{first}`, but the server annotates `{name}` readOnlyHint, so its calls are passed through unkeyed and `{first}` would never apply: add `keyed = true` to key them, or remove it"
                ));
            }
            for member in key {
                let known = tool
                    .properties
                    .as_ref()
                    .is_some_and(|properties| properties.contains(*member));
                if !known {
                    let listed = tool.properties.as_ref().map_or_else(
                        || "its inputSchema lists no properties".to_owned(),
                        |p| {
                            format!(
                                "its arguments are: {}",
                                p.iter().cloned().collect::<Vec<_>>().join(", ")
                            )
                        },
                    );
                    return Err(format!(
                        "the config's [tools.{name}] key names `{member}`, which is not an argument of `{name}` ({listed})"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn table() -> ToolTable {
        let mut table = ToolTable::default();
        let page = json!({"tools": [
            {"name": "send_refund", "inputSchema": {"type": "object",
                "properties": {"order_id": {}, "amount_cents": {}}}},
            {"name": "lookup", "annotations": {"readOnlyHint": true}, "inputSchema": {"type": "object"}},
        ], "nextCursor": "2"});
        assert_eq!(
            table.add_page(page.as_object().unwrap()).as_deref(),
            Some("2")
        );
        table
    }

    // pins Y2: a listing whose cursors come round again (A, B, A) or never end stops
    #[test]
    fn cursor_cycles_end_the_listing() {
        let mut table = ToolTable::default();
        let page = |cursor: &str| json!({"tools": [], "nextCursor": cursor});
        let next =
            |table: &mut ToolTable, cursor: &str| table.add_page(page(cursor).as_object().unwrap());
        assert_eq!(next(&mut table, "A").as_deref(), Some("A"));
        assert_eq!(next(&mut table, "B").as_deref(), Some("B"));
        assert_eq!(next(&mut table, "A"), None);
        let mut endless = ToolTable::default();
        let pages = (0..)
            .take_while(|n| next(&mut endless, &n.to_string()).is_some())
            .count();
        assert_eq!(pages, MAX_PAGES - 1);
        assert_eq!(
            table.add_page(json!({"tools": []}).as_object().unwrap()),
            None
        );
    }

    // pins Y2: readOnlyHint passes through; everything else, unlisted names too, is keyed
    #[test]
    fn annotations_decide() {
        let config = Config::defaults();
        let table = table();
        assert!(table.plan(&config, "send_refund").is_some());
        assert!(table.plan(&config, "lookup").is_none());
        assert!(table.plan(&config, "unlisted").is_some());
    }

    // pins Y4: unknown tools and key members are named
    #[test]
    fn the_config_is_checked_against_the_listing() {
        let table = table();
        let ok = Config::parse("[tools.send_refund]\nkey = [\"order_id\"]\n", "c").unwrap();
        assert_eq!(table.check(&ok), Ok(()));
        let typo = Config::parse("[tools.send_refnud]\n", "c").unwrap();
        let e = table.check(&typo).unwrap_err();
        assert!(
            e.contains("`send_refnud`") && e.contains("lookup, send_refund"),
            "{e}"
        );
        let member = Config::parse("[tools.send_refund]\nkey = [\"order\"]\n", "c").unwrap();
        let e = table.check(&member).unwrap_err();
        assert!(
            e.contains("`order`") && e.contains("amount_cents, order_id"),
            "{e}"
        );
        let none = Config::parse("[tools.lookup]\nkeyed = true\nkey = [\"q\"]\n", "c").unwrap();
        assert!(table
            .check(&none)
            .unwrap_err()
            .contains("lists no properties"));
    }

    // pins Y2, Y4: a keyed call's setting on a tool annotated read-only, without
    // `keyed = true`, would never apply: refused by name
    #[test]
    fn settings_for_read_only_tools_need_keyed() {
        let table = table();
        let silent = Config::parse("[tools.lookup]\nrequire_approval = true\n", "c").unwrap();
        let e = table.check(&silent).unwrap_err();
        assert!(
            e.contains("`require_approval`")
                && e.contains("readOnlyHint")
                && e.contains("keyed = true"),
            "{e}"
        );
        let keyed = Config::parse(
            "[tools.lookup]\nkeyed = true\nrequire_approval = true\n",
            "c",
        )
        .unwrap();
        assert_eq!(table.check(&keyed), Ok(()));
        assert!(table
            .plan(&keyed, "lookup")
            .unwrap()
            .spec
            .approval
            .is_some());
        let unkeyed = Config::parse("[tools.send_refund]\nkeyed = false\n", "c").unwrap();
        assert_eq!(table.check(&unkeyed), Ok(()));
    }
}
