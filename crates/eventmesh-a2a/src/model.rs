//! The A2A v1.0 data model (`lf.a2a.v1`), serialized as ProtoJSON: camelCase
//! field names, enums as their full names (`TASK_STATE_COMPLETED`,
//! `ROLE_AGENT`), no `kind` fields.
//!
//! Invariants:
//! - Serializing omits what ProtoJSON omits: `None`, empty lists and `false`.
//!   Fields the protocol marks as always present (`ListTasksResponse`'s
//!   `nextPageToken`, `pageSize`, `totalSize`, `tasks`; a status's `state`; a
//!   message's or artifact's `parts`) are always written.
//! - Deserializing ignores unknown fields (a stray `kind` included) and
//!   rejects wrong JSON types and unknown enum names.
//! - SendMessage results, stream events and webhook bodies are wrapped in a
//!   [`StreamResponse`] (`{"task": …}`, `{"statusUpdate": …}`); every other
//!   result is a bare object.
//! - Timestamps are RFC 3339 in UTC with a `Z` ([`now_timestamp`]).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub use crate::requests::*;

/// The lifecycle state of a task. The discriminants are the proto numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TaskState {
    #[default]
    Unspecified = 0,
    Submitted = 1,
    Working = 2,
    Completed = 3,
    Failed = 4,
    Canceled = 5,
    InputRequired = 6,
    Rejected = 7,
    AuthRequired = 8,
}

const STATES: [TaskState; 9] = [
    TaskState::Unspecified,
    TaskState::Submitted,
    TaskState::Working,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::Canceled,
    TaskState::InputRequired,
    TaskState::Rejected,
    TaskState::AuthRequired,
];

/// v1.0 names, indexed by discriminant.
const V1_STATE_NAMES: [&str; 9] = [
    "TASK_STATE_UNSPECIFIED",
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
];

/// v0.3 names, indexed by discriminant.
const V03_STATE_NAMES: [&str; 9] = [
    "unknown",
    "submitted",
    "working",
    "completed",
    "failed",
    "canceled",
    "input-required",
    "rejected",
    "auth-required",
];

impl TaskState {
    /// Completed, canceled, failed and rejected tasks never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Canceled | Self::Failed | Self::Rejected
        )
    }

    /// Input-required and auth-required tasks wait for the client: a blocking
    /// send returns and a stream closes, but the task may continue.
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }

    /// The v0.3 name (`input-required`); unspecified is `unknown`.
    pub fn v03(self) -> &'static str {
        V03_STATE_NAMES[self as usize]
    }

    /// The state for a v0.3 name; `unknown` is unspecified.
    pub fn from_v03(name: &str) -> Option<Self> {
        V03_STATE_NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| STATES[i])
    }

    /// The v1.0 name (`TASK_STATE_INPUT_REQUIRED`).
    pub fn as_v1(self) -> &'static str {
        V1_STATE_NAMES[self as usize]
    }

    /// The state for a v1.0 name.
    pub fn from_v1(name: &str) -> Option<Self> {
        V1_STATE_NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| STATES[i])
    }
}

impl Serialize for TaskState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_v1())
    }
}

impl<'de> Deserialize<'de> for TaskState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::from_v1(&name).ok_or_else(|| D::Error::unknown_variant(&name, &V1_STATE_NAMES))
    }
}

/// Who sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Role {
    #[default]
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "ROLE_USER")]
    User,
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// One piece of content: exactly one of `text`, `raw` (base64, kept as the
/// text it arrived as), `url` or `data` (any JSON value).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// Checks that the part has exactly one kind of content; `at` names the
    /// part in the error (`message.parts[1]`).
    pub fn validate(&self, at: &str) -> Result<(), String> {
        let kinds = [
            self.text.is_some(),
            self.raw.is_some(),
            self.url.is_some(),
            self.data.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() == 1 {
            Ok(())
        } else {
            Err(format!(
                "{at}: a part has exactly one of text, raw, url, data"
            ))
        }
    }
}

fn validate_parts(parts: &[Part], at: &str) -> Result<(), String> {
    if parts.is_empty() {
        return Err(format!("{at}.parts: at least one part is required"));
    }
    parts
        .iter()
        .enumerate()
        .try_for_each(|(i, p)| p.validate(&format!("{at}.parts[{i}]")))
}

/// A message between a client and an agent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Message {
    pub message_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    /// A one-part text message from the agent.
    pub fn agent_text(message_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self::with_role(Role::Agent, message_id.into(), text.into())
    }

    /// A one-part text message from the user.
    pub fn user_text(message_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self::with_role(Role::User, message_id.into(), text.into())
    }

    fn with_role(role: Role, message_id: String, text: String) -> Self {
        Self {
            message_id,
            role,
            parts: vec![Part::text(text)],
            ..Self::default()
        }
    }

    /// Checks the fields the protocol requires: a non-empty `messageId`, a
    /// role, and at least one part, each valid.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_at("message")
    }

    /// [`Message::validate`], naming the message `at` in the error.
    pub fn validate_at(&self, at: &str) -> Result<(), String> {
        if self.message_id.is_empty() {
            return Err(format!("{at}.messageId: missing"));
        }
        if self.role == Role::Unspecified {
            return Err(format!("{at}.role: must be ROLE_USER or ROLE_AGENT"));
        }
        validate_parts(&self.parts, at)
    }
}

/// A task's state, with the message that explains it and when it was set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

impl TaskStatus {
    /// A status in `state`, stamped now, without a message.
    pub fn now(state: TaskState) -> Self {
        Self {
            state,
            message: None,
            timestamp: Some(now_timestamp()),
        }
    }
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub parts: Vec<Part>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

impl Artifact {
    /// Checks a non-empty `artifactId` and at least one part, each valid.
    pub fn validate(&self, at: &str) -> Result<(), String> {
        if self.artifact_id.is_empty() {
            return Err(format!("{at}.artifactId: missing"));
        }
        validate_parts(&self.parts, at)
    }
}

/// A unit of work, as clients see it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl Task {
    /// The task with its history cut to a request's `historyLength`: `None`
    /// keeps all of it, 0 (or less) none, `n` the last `n` messages.
    pub fn with_history_length(&self, n: Option<i32>) -> Task {
        let mut task = self.clone();
        if let Some(n) = n {
            let keep = usize::try_from(n).unwrap_or(0);
            let drop = task.history.len().saturating_sub(keep);
            task.history.drain(..drop);
        }
        task
    }

    /// The task without its artifacts (ListTasks without `includeArtifacts`).
    pub fn without_artifacts(&self) -> Task {
        Task {
            artifacts: Vec::new(),
            ..self.clone()
        }
    }
}

/// A change of a task's status, sent on streams and to webhooks. v1.0 has no
/// `final` flag; v0.3 adds it ([`crate::v03::status_update_to_v03`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// A new artifact, or a chunk appended to one (`append`), possibly its last.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    #[serde(default, skip_serializing_if = "is_false")]
    pub append: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub last_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// The v1.0 result of SendMessage (`task` or `message` only), each stream
/// event, and each webhook body: an object with exactly one of `task`,
/// `message`, `statusUpdate`, `artifactUpdate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    Message(Message),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// The current time as RFC 3339 UTC with milliseconds and a `Z`
/// (`2026-12-01T09:50:43.435Z`).
pub fn now_timestamp() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_timestamp(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC with
/// milliseconds and a `Z`.
pub fn format_timestamp(unix_millis: i64) -> String {
    let secs = unix_millis.div_euclid(1000);
    let millis = unix_millis.rem_euclid(1000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Parses an RFC 3339 timestamp (`Z` or a `±hh:mm` offset, any fraction up to
/// nanoseconds) into seconds since the Unix epoch and nanoseconds; `None` if
/// it is not one. The pair orders like the instants it stands for.
pub fn parse_timestamp(s: &str) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits.iter().try_fold(0i64, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    };
    let sep = |at: usize, ok: &[u8]| b.get(at).is_some_and(|c| ok.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0u32;
    if sep(at, b".") {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 || digits > 9 {
            return None;
        }
        let frac = u32::try_from(num(at + 1, digits)?).ok()?;
        nanos = frac * 10u32.pow(9 - u32::try_from(digits).ok()?);
        at += 1 + digits;
    }
    let offset = match b.get(at..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(at + 1, 2)?, num(at + 4, 2)?);
            let off = oh * 3600 + om * 60;
            if *sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some((days * 86_400 + h * 3600 + mi * 60 + sec - offset, nanos))
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Serializes one of this crate's types. They hold only string-keyed maps
/// and JSON values, so serializing cannot fail; `Null` stands in if it did.
pub(crate) fn to_json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use TaskState as S;

    #[test]
    fn state_names_both_versions() {
        for (i, s) in STATES.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert_eq!(TaskState::from_v1(s.as_v1()), Some(*s));
            assert_eq!(TaskState::from_v03(s.v03()), Some(*s));
            assert_eq!(to_json(s), json!(s.as_v1()));
        }
        assert_eq!(S::InputRequired.v03(), "input-required");
        assert_eq!(S::Unspecified.v03(), "unknown");
        assert_eq!(S::AuthRequired.as_v1(), "TASK_STATE_AUTH_REQUIRED");
        assert_eq!(S::from_v1("completed"), None);
        assert_eq!(S::from_v03("TASK_STATE_WORKING"), None);
        let terminal: Vec<_> = STATES.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(
            terminal,
            [S::Completed, S::Failed, S::Canceled, S::Rejected]
        );
        let interrupted: Vec<_> = STATES.into_iter().filter(|s| s.is_interrupted()).collect();
        assert_eq!(interrupted, [S::InputRequired, S::AuthRequired]);
        let err = serde_json::from_value::<S>(json!("completed")).unwrap_err();
        assert!(
            err.to_string().starts_with("unknown variant `completed`"),
            "{err}"
        );
    }

    #[test]
    fn message_validation_names_the_field() {
        let mut m = Message::user_text("m-1", "hi");
        assert_eq!(m.validate(), Ok(()));
        let want = json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]});
        assert_eq!(to_json(&m), want);
        let one_of = "message.parts[1]: a part has exactly one of text, raw, url, data";
        m.parts.push(Part::default());
        assert_eq!(m.validate().unwrap_err(), one_of);
        m.parts[1] = serde_json::from_value(json!({"url": "u", "data": 1})).unwrap();
        assert_eq!(m.validate().unwrap_err(), one_of);
        m.parts.clear();
        assert_eq!(
            m.validate().unwrap_err(),
            "message.parts: at least one part is required"
        );
        m.role = Role::Unspecified;
        assert_eq!(
            m.validate().unwrap_err(),
            "message.role: must be ROLE_USER or ROLE_AGENT"
        );
        m.message_id.clear();
        assert_eq!(m.validate().unwrap_err(), "message.messageId: missing");
        let a: Artifact = serde_json::from_value(json!({"artifactId": "a"})).unwrap();
        let err = "artifact.parts: at least one part is required";
        assert_eq!(a.validate("artifact").unwrap_err(), err);
    }

    #[test]
    fn history_length_and_artifacts() {
        let task: Task =
            serde_json::from_value(json!({"id": "t", "status": {"state": "TASK_STATE_WORKING"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "x"}]}],
            "history": [{"messageId": "m0"}, {"messageId": "m1"}, {"messageId": "m2"}]}))
            .unwrap();
        let ids = |n: Option<i32>| -> Vec<String> {
            let t = task.with_history_length(n);
            t.history.into_iter().map(|m| m.message_id).collect()
        };
        assert_eq!(ids(None), ["m0", "m1", "m2"]);
        assert_eq!(ids(Some(0)), Vec::<String>::new());
        assert_eq!(ids(Some(-1)), Vec::<String>::new());
        assert_eq!(ids(Some(2)), ["m1", "m2"]);
        assert_eq!(ids(Some(9)), ["m0", "m1", "m2"]);
        assert!(task.without_artifacts().artifacts.is_empty());
        assert_eq!(task.without_artifacts().history, task.history);
    }

    #[test]
    fn parse_params_names_the_field() {
        let get = |v: Value| parse_params::<GetTaskRequest>(&v).unwrap_err();
        assert_eq!(
            get(json!({"id": 5})),
            "id: invalid type: integer `5`, expected a string"
        );
        assert_eq!(get(json!({"historyLength": 1})), "missing field `id`");
        let err = get(json!({"historyLength": "x", "id": "t"}));
        assert_eq!(
            err,
            "historyLength: invalid type: string \"x\", expected i32"
        );
        let err = parse_params::<ListTasksRequest>(&json!({"pageSize": 1, "status": "completed"}));
        assert!(err
            .unwrap_err()
            .starts_with("status: unknown variant `completed`"));
        let err = parse_params::<SendMessageRequest>(&json!({"message": {"parts": [{"text": 1}]}}));
        assert_eq!(
            err.unwrap_err(),
            "message: invalid type: integer `1`, expected a string"
        );
        let ok: GetTaskRequest = parse_params(&json!({"id": "t", "kind": "x"})).unwrap();
        assert_eq!(ok.id, "t");
    }

    #[test]
    fn timestamps() {
        let known = [
            (0, "1970-01-01T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_709_210_096_789, "2024-02-29T12:34:56.789Z"),
            (1_709_251_199_999, "2024-02-29T23:59:59.999Z"),
            (1_709_251_200_000, "2024-03-01T00:00:00.000Z"),
            (1_735_689_599_000, "2024-12-31T23:59:59.000Z"),
            (1_796_118_643_435, "2026-12-01T09:50:43.435Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
        ];
        for (millis, text) in known {
            assert_eq!(format_timestamp(millis), text);
            let (secs, nanos) = parse_timestamp(text).unwrap();
            assert_eq!(secs * 1000 + i64::from(nanos / 1_000_000), millis, "{text}");
        }
        let now = now_timestamp();
        assert_eq!(
            (now.len(), &now[19..20], &now[23..]),
            (24, ".", "Z"),
            "{now}"
        );
        assert!(
            parse_timestamp(&now).is_some_and(|(s, _)| s > 1_577_836_800),
            "{now}"
        );
    }

    #[test]
    fn parses_timestamps() {
        let cases = [
            (
                "2026-12-01T09:50:43.435333Z",
                Some((1_796_118_643, 435_333_000)),
            ),
            ("2026-12-01T09:50:43Z", Some((1_796_118_643, 0))),
            ("2026-12-01T10:50:43+01:00", Some((1_796_118_643, 0))),
            (
                "2026-12-01t08:50:43.5-01:00",
                Some((1_796_118_643, 500_000_000)),
            ),
            ("2026-12-01T09:50:43", None),
            ("2026-13-01T09:50:43Z", None),
            ("2026-12-01 09:50Z", None),
            ("2026-12-01T09:50:43.Z", None),
            ("2026-12-01T09:50:43.1234567890Z", None),
            ("x", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_timestamp(text), want, "{text}");
        }
    }
}
