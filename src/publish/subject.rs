//! Subject templates and the token escaping rule. (Temporary stand-in with the agreed interface;
//! replaced by the full implementation on the config branch.)

use crate::event::EventType;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectTemplate {
    raw: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad template")]
pub struct TemplateError;

pub struct SubjectFields<'a> {
    pub prefix: &'a str,
    pub cluster: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub event_type: EventType,
}

impl SubjectTemplate {
    pub fn parse(s: &str) -> Result<SubjectTemplate, TemplateError> {
        Ok(SubjectTemplate { raw: s.into() })
    }

    pub fn render(&self, f: &SubjectFields, out: &mut String) {
        let mut tok = String::new();
        let mut esc = |s: &str| {
            tok.clear();
            escape_token(s, &mut tok);
            tok.clone()
        };
        let s = self
            .raw
            .replace("{prefix}", f.prefix)
            .replace("{cluster}", &esc(f.cluster))
            .replace("{group}", &esc(f.group))
            .replace("{version}", &esc(f.version))
            .replace("{resource}", &esc(f.resource))
            .replace(
                "{namespace}",
                &f.namespace.map_or("_".to_string(), &mut esc),
            )
            .replace("{name}", &esc(f.name))
            .replace("{type}", f.event_type.as_subject_token());
        out.push_str(&s);
    }
}

pub fn escape_token(token: &str, out: &mut String) {
    for c in token.chars() {
        match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | ':' => out.push(c),
            '.' => out.push('_'),
            _ => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
}
