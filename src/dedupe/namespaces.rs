//! Namespaces, interned: each tracked object holds a 4-byte index instead of a string.

use std::collections::HashMap;

/// `Tracked::namespace` of a cluster-scoped object.
pub(super) const NO_NAMESPACE: u32 = u32::MAX;

/// Namespaces, interned: each tracked object holds a 4-byte index. A namespace is dropped when its
/// last object is forgotten.
#[derive(Debug, Default)]
pub(super) struct Namespaces {
    /// By index; `None` for a free slot.
    pub(super) names: Vec<Option<Box<str>>>,
    /// Objects holding each index.
    refs: Vec<u32>,
    pub(super) index: HashMap<Box<str>, u32>,
    free: Vec<u32>,
}

impl Namespaces {
    pub(super) fn acquire(&mut self, namespace: Option<&str>) -> u32 {
        let Some(namespace) = namespace else {
            return NO_NAMESPACE;
        };
        let id = match self.index.get(namespace) {
            Some(&id) => id,
            None => {
                let id = match self.free.pop() {
                    Some(id) => {
                        self.names[id as usize] = Some(namespace.into());
                        id
                    }
                    None => {
                        self.names.push(Some(namespace.into()));
                        self.refs.push(0);
                        u32::try_from(self.names.len() - 1)
                            .expect("fewer than 4 billion namespaces")
                    }
                };
                self.index.insert(namespace.into(), id);
                id
            }
        };
        self.refs[id as usize] += 1;
        id
    }

    pub(super) fn release(&mut self, id: u32) {
        if id == NO_NAMESPACE {
            return;
        }
        let refs = &mut self.refs[id as usize];
        *refs -= 1;
        if *refs == 0 {
            if let Some(name) = self.names[id as usize].take() {
                self.index.remove(&name);
            }
            self.free.push(id);
        }
    }

    pub(super) fn get(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize)?.as_deref()
    }
}
