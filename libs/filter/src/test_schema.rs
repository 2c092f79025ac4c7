//! The payload schema the unit tests share.

use std::collections::BTreeMap;

use eddy_model::FieldType;

/// `section` and `tags` keywords, `size` integer, `price` float, `ok` bool.
pub(crate) fn schema() -> BTreeMap<String, FieldType> {
    [
        ("section", FieldType::Keyword),
        ("tags", FieldType::Keyword),
        ("size", FieldType::Integer),
        ("price", FieldType::Float),
        ("ok", FieldType::Bool),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_owned(), t))
    .collect()
}
