//! TopoRAG's e-mail variant (§6.1.3, Enron): items are e-mails, the graph is the people graph of
//! the observed e-mails, and the topologically closest people's e-mails are the candidates.

use std::collections::HashSet;

use arrow::array::{Array, AsArray, RecordBatch};
use tgrag_schemas::columns;

use crate::{Result, StageError};

/// An e-mail graph's messages, as the e-mail variant reads them.
pub struct Mails {
    pub ids: Vec<u32>,
    pub sender: Vec<u32>,
    pub recipients: Vec<Vec<u32>>,
    pub time: Option<Vec<i64>>,
    pub body: Vec<String>,
}

/// Reads the `emails` table.
pub fn read_mails(emails: &RecordBatch) -> Result<Mails> {
    let ids = columns::u32s(emails, "email_id")?.values().to_vec();
    let sender = columns::u32s(emails, "sender")?.values().to_vec();
    let rec = emails
        .column_by_name("recipients")
        .and_then(|c| c.as_list_opt::<i32>())
        .ok_or_else(|| StageError::Input("emails: column `recipients` is not a list of u32".into()))?;
    let mut recipients = Vec::with_capacity(rec.len());
    for i in 0..rec.len() {
        let v = rec.value(i);
        let v = v
            .as_primitive_opt::<arrow::datatypes::UInt32Type>()
            .ok_or_else(|| StageError::Input(format!("emails row {i}: `recipients` is not a list of u32")))?;
        recipients.push(v.values().to_vec());
    }
    let time = match emails.column_by_name("time") {
        Some(_) => {
            let t = columns::i64s(emails, "time")?;
            (t.null_count() == 0 && !t.is_empty()).then(|| t.values().to_vec())
        }
        None => None,
    };
    let b = columns::strs(emails, "body")?;
    let body = (0..b.len()).map(|i| b.value(i).to_string()).collect();
    Ok(Mails { ids, sender, recipients, time, body })
}

impl Mails {
    /// Checks that every sender and recipient is one of `people` tag nodes.
    pub fn check_people(&self, people: usize) -> Result<()> {
        if let Some((i, &p)) = self.sender.iter().chain(self.recipients.iter().flatten()).enumerate().find(|(_, p)| **p as usize >= people)
        {
            return Err(StageError::Input(format!("emails: person {p} (entry {i}) is not a tag_nodes row ({people} people)")));
        }
        Ok(())
    }

    /// Indices of the e-mails kept after dropping repeats: the first e-mail with a (sender, body)
    /// wins (the corpus keeps a message in every mailbox it passed through).
    pub fn unique(&self) -> Vec<usize> {
        let mut seen = HashSet::new();
        (0..self.ids.len()).filter(|&i| seen.insert((self.sender[i], self.body[i].trim()))).collect()
    }
}

/// The people graph of the `observed` e-mails (`rows[k]`: the e-mail row of item k): undirected
/// sender–recipient edges (sorted, distinct), and each person's observed e-mails (as items).
pub fn people_graph(mails: &Mails, rows: &[usize], observed: &[u32], people: usize) -> (Vec<(u32, u32)>, Vec<Vec<u32>>) {
    let mut pe: Vec<(u32, u32)> = Vec::new();
    let mut mailbox: Vec<Vec<u32>> = vec![Vec::new(); people];
    for &k in observed {
        let i = rows[k as usize];
        let s = mails.sender[i];
        mailbox[s as usize].push(k);
        for &r in &mails.recipients[i] {
            if r != s {
                pe.push((s.min(r), s.max(r)));
                mailbox[r as usize].push(k);
            }
        }
    }
    pe.sort_unstable();
    pe.dedup();
    mailbox.iter_mut().for_each(|m| m.dedup());
    (pe, mailbox)
}

/// The e-mails of the closest people: the first person of every list (closest to the sender, to the
/// receiver), then the second of every list, … until at least `k` distinct e-mails are pooled or the
/// lists run out. Sorted by e-mail index.
pub fn mail_pool(lists: &[Vec<u32>], mailbox: &[Vec<u32>], k: usize) -> Vec<u32> {
    let mut pool: Vec<u32> = Vec::new();
    let mut depth = 0;
    while pool.len() < k && lists.iter().any(|l| depth < l.len()) {
        for l in lists {
            if let Some(&p) = l.get(depth) {
                pool.extend(&mailbox[p as usize]);
            }
        }
        pool.sort_unstable();
        pool.dedup();
        depth += 1;
    }
    pool
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_pool_takes_the_closest_people_first_and_widens_only_when_short() {
        // Person 0's mailbox holds e-mails 1 and 4, person 1's 4 and 7, person 2's 9, person 3 none.
        let mailbox = vec![vec![1, 4], vec![4, 7], vec![9], vec![]];
        // Closest to the sender: 1 then 2; to the receiver: 0 then 3. Depth 0 pools {1, 4, 7}.
        let lists = vec![vec![1, 2], vec![0, 3]];
        assert_eq!(mail_pool(&lists, &mailbox, 3), vec![1, 4, 7]);
        // Four wanted: depth 1 adds person 2's e-mail 9 (and person 3's nothing).
        assert_eq!(mail_pool(&lists, &mailbox, 4), vec![1, 4, 7, 9]);
        // More than there are: everything, then stop.
        assert_eq!(mail_pool(&lists, &mailbox, 10), vec![1, 4, 7, 9]);
        assert_eq!(mail_pool(&[vec![3]], &mailbox, 1), Vec::<u32>::new());
    }

    #[test]
    fn people_graph_joins_sender_and_recipients_of_observed_mails_only() {
        // E-mail 0: 0 → {1, 2}; e-mail 1: 1 → {0}; e-mail 2 (not observed): 2 → {3}.
        let mails = Mails {
            ids: vec![10, 11, 12],
            sender: vec![0, 1, 2],
            recipients: vec![vec![1, 2], vec![0, 1], vec![3]],
            time: None,
            body: vec!["a".into(), "b".into(), "c".into()],
        };
        let (edges, mailbox) = people_graph(&mails, &[0, 1, 2], &[0, 1], 4);
        assert_eq!(edges, vec![(0, 1), (0, 2)]);
        assert_eq!(mailbox, vec![vec![0, 1], vec![0, 1], vec![0], vec![]]);
        assert!(mails.check_people(4).is_ok());
        assert!(mails.check_people(3).is_err());
        let dup = Mails {
            ids: vec![1, 2, 3],
            sender: vec![0, 0, 1],
            recipients: vec![vec![], vec![], vec![]],
            time: None,
            body: vec!["hi".into(), " hi ".into(), "hi".into()],
        };
        assert_eq!(dup.unique(), vec![0, 2]);
    }
}
