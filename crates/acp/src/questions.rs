//! Claude's questions (`AskUserQuestion`, an AHP input request inside the host) asked in the
//! editor: as one form (`elicitation/create`, form mode) when the client can show forms, as
//! Zed and most current clients do; otherwise one `session/request_permission` per choice
//! question, each choice an option plus *Skip*.
//!
//! A form has, per question, a field of its choices (one pick, or several for a multi-select
//! question) and a free-text field beside it, Claude Code's own "Other" box: typed alone it is
//! the answer, typed beside picks it joins them. No field is required, so a question can be
//! left unanswered, as in the CLI's own prompt.

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CreateElicitationRequest, ElicitationAction, ElicitationContentValue, ElicitationFormMode,
    ElicitationMode, ElicitationPropertySchema, ElicitationSchema, ElicitationScope,
    ElicitationSessionScope, EnumOption, MultiSelectPropertySchema, PermissionOption,
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest, StringPropertySchema,
    ToolCallId, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use agent_client_protocol::{Client, Error};
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputOption, ChatInputQuestion,
    ChatInputRequest, ChatInputResponseKind, ChatInputSelectedAnswerValue,
    ChatInputSelectedManyAnswerValue,
};
use claude_host_agent::{InputReply, SessionHandle};
use std::collections::HashMap;

/// The option id of *Skip* in the permission fallback.
const SKIP: &str = "reject";

/// Asks the editor the questions of `request` and answers the request with what it said.
pub(crate) async fn ask(
    handle: SessionHandle,
    session_id: String,
    request: ChatInputRequest,
    forms: bool,
    cx: ConnectionTo<Client>,
) {
    let reply = if forms {
        let form = form_request(&session_id, &request);
        let answered = cx.send_request(form).block_task().await;
        if let Err(e) = &answered {
            tracing::info!(error = %e, "the editor did not answer a question form; the questions are cancelled");
        }
        form_reply(&request, answered.map(|r| r.action))
    } else {
        ask_by_permission(&session_id, &request, &cx).await
    };
    if let Err(e) = handle.answer_input(&request.id, reply).await {
        // Settled otherwise meanwhile (the turn was cancelled).
        tracing::debug!(error = %e, "an answer came after the question was settled");
    }
}

/// A choice question: its id, text, header, options, and whether several may be picked.
struct Choice<'a> {
    id: &'a str,
    message: &'a str,
    header: Option<&'a str>,
    options: &'a [ChatInputOption],
    many: bool,
}

/// `q` as a choice question (`None` for other kinds, which `AskUserQuestion` does not make).
fn choices(q: &ChatInputQuestion) -> Option<Choice<'_>> {
    match q {
        ChatInputQuestion::SingleSelect(s) => Some(Choice {
            id: &s.id,
            message: &s.message,
            header: s.title.as_deref(),
            options: &s.options,
            many: false,
        }),
        ChatInputQuestion::MultiSelect(s) => Some(Choice {
            id: &s.id,
            message: &s.message,
            header: s.title.as_deref(),
            options: &s.options,
            many: true,
        }),
        _ => None,
    }
}

/// The form field of a question's free-text answer.
fn other_field(question_id: &str) -> String {
    format!("{question_id}_other")
}

/// The `elicitation/create` that asks every question of `request` in one form.
fn form_request(session_id: &str, request: &ChatInputRequest) -> CreateElicitationRequest {
    let questions: Vec<_> = request
        .questions
        .iter()
        .flatten()
        .filter_map(choices)
        .collect();
    let single = questions.len() == 1;
    let mut schema = ElicitationSchema::new();
    for q in &questions {
        let options: Vec<EnumOption> = q
            .options
            .iter()
            .map(|o| {
                EnumOption::new(o.id.clone(), o.label.clone()).description(o.description.clone())
            })
            .collect();
        // One question is the form's message; several each carry their own text.
        let description = (!single).then(|| q.message.to_owned());
        let title = q.header.map(str::to_owned);
        let field = if q.many {
            ElicitationPropertySchema::Array(
                MultiSelectPropertySchema::titled(options)
                    .title(title)
                    .description(description),
            )
        } else {
            ElicitationPropertySchema::String(
                StringPropertySchema::new()
                    .one_of(options)
                    .title(title)
                    .description(description),
            )
        };
        let other = StringPropertySchema::new()
            .title("Other".to_owned())
            .description(
                if q.many {
                    "Your own answer, added to the choices above (optional)."
                } else {
                    "Your own answer instead of a choice, or a note to it (optional)."
                }
                .to_owned(),
            );
        schema = schema.property(q.id, field, false).property(
            other_field(q.id),
            ElicitationPropertySchema::String(other),
            false,
        );
    }
    let message = match questions.as_slice() {
        [q] => q.message.to_owned(),
        _ => format!("Claude has {} questions for you.", questions.len()),
    };
    let scope = ElicitationSessionScope::new(session_id.to_owned())
        .tool_call_id(ToolCallId::new(request.id.clone()));
    CreateElicitationRequest::new(
        ElicitationMode::Form(ElicitationFormMode::new(
            ElicitationScope::Session(scope),
            schema,
        )),
        message,
    )
}

/// The answers of a form's reply: a pick (or picks), and the free text beside them. Declined,
/// cancelled, failed or left empty, the questions are not answered.
fn form_reply(
    request: &ChatInputRequest,
    answered: Result<ElicitationAction, Error>,
) -> InputReply {
    let content = match answered {
        Ok(ElicitationAction::Accept(a)) => a.content.unwrap_or_default(),
        Ok(ElicitationAction::Decline) => return unanswered(ChatInputResponseKind::Decline),
        _ => return unanswered(ChatInputResponseKind::Cancel),
    };
    let mut answers = HashMap::new();
    for q in request.questions.iter().flatten().filter_map(choices) {
        let picks = picked(content.get(q.id));
        let other = match content.get(&other_field(q.id)) {
            Some(ElicitationContentValue::String(s)) if !s.trim().is_empty() => {
                Some(vec![s.trim().to_owned()])
            }
            _ => None,
        };
        if picks.is_empty() && other.is_none() {
            continue;
        }
        let value = if q.many {
            ChatInputAnswerValue::SelectedMany(ChatInputSelectedManyAnswerValue {
                value: picks,
                freeform_values: other,
            })
        } else {
            ChatInputAnswerValue::Selected(ChatInputSelectedAnswerValue {
                value: picks.into_iter().next().unwrap_or_default(),
                freeform_values: other,
            })
        };
        answers.insert(
            q.id.to_owned(),
            ChatInputAnswer::Submitted(ChatInputAnswered { value }),
        );
    }
    if answers.is_empty() {
        return unanswered(ChatInputResponseKind::Decline);
    }
    InputReply {
        response: ChatInputResponseKind::Accept,
        answers,
    }
}

/// The choices a form field holds: one string, or several.
fn picked(value: Option<&ElicitationContentValue>) -> Vec<String> {
    let all = match value {
        Some(ElicitationContentValue::String(s)) => vec![s.clone()],
        Some(ElicitationContentValue::StringArray(v)) => v.clone(),
        _ => Vec::new(),
    };
    all.into_iter().filter(|s| !s.is_empty()).collect()
}

fn unanswered(response: ChatInputResponseKind) -> InputReply {
    InputReply {
        response,
        answers: HashMap::new(),
    }
}

/// Each choice question through `session/request_permission`, one at a time.
async fn ask_by_permission(
    session_id: &str,
    request: &ChatInputRequest,
    cx: &ConnectionTo<Client>,
) -> InputReply {
    let mut answers = HashMap::new();
    for q in request.questions.iter().flatten().filter_map(choices) {
        let mut options: Vec<PermissionOption> = q
            .options
            .iter()
            .map(|o| {
                PermissionOption::new(
                    o.id.clone(),
                    o.label.clone(),
                    PermissionOptionKind::AllowOnce,
                )
            })
            .collect();
        options.push(PermissionOption::new(
            SKIP,
            "Skip",
            PermissionOptionKind::RejectOnce,
        ));
        let call = ToolCallUpdate::new(
            format!("{}#{}", request.id, q.id),
            ToolCallUpdateFields::new()
                .title(q.message.to_owned())
                .kind(ToolKind::Other),
        );
        let ask = RequestPermissionRequest::new(session_id.to_owned(), call, options);
        match cx.send_request(ask).block_task().await {
            Ok(r) => match r.outcome {
                RequestPermissionOutcome::Selected(s) if &*s.option_id.0 != SKIP => {
                    answers.insert(
                        q.id.to_owned(),
                        ChatInputAnswer::Submitted(ChatInputAnswered {
                            value: ChatInputAnswerValue::Selected(ChatInputSelectedAnswerValue {
                                value: s.option_id.0.to_string(),
                                freeform_values: None,
                            }),
                        }),
                    );
                }
                RequestPermissionOutcome::Selected(_) => {}
                _ => return unanswered(ChatInputResponseKind::Cancel),
            },
            Err(_) => return unanswered(ChatInputResponseKind::Cancel),
        }
    }
    if answers.is_empty() {
        return unanswered(ChatInputResponseKind::Decline);
    }
    InputReply {
        response: ChatInputResponseKind::Accept,
        answers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::ElicitationAcceptAction;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    /// The input request the agent makes of two questions: one pick, several picks.
    fn two_questions() -> ChatInputRequest {
        claude_host_agent::questions::request(
            "toolu_1",
            &json!({"questions": [
                {"question": "Which fruit?", "header": "Fruit", "multiSelect": false,
                 "options": [{"label": "Apple", "description": "red"}, {"label": "Banana"}]},
                {"question": "Which toppings?", "header": "Toppings", "multiSelect": true,
                 "options": [{"label": "Cream"}, {"label": "Nuts, chopped"}]}]}),
        )
    }

    fn accept(content: Value) -> Result<ElicitationAction, Error> {
        let content: BTreeMap<String, ElicitationContentValue> =
            serde_json::from_value(content).unwrap();
        Ok(ElicitationAction::Accept(
            ElicitationAcceptAction::new().content(content),
        ))
    }

    fn answer_texts(reply: &InputReply) -> BTreeMap<String, Option<String>> {
        reply
            .answers
            .iter()
            .map(|(k, a)| (k.clone(), claude_host_agent::questions::answer_text(a)))
            .collect()
    }

    #[test]
    fn a_form_has_a_choice_field_and_an_other_field_per_question() {
        let form = serde_json::to_value(form_request("s1", &two_questions())).unwrap();
        assert_eq!(form["mode"], "form", "{form}");
        assert_eq!(form["sessionId"], "s1", "{form}");
        assert_eq!(form["toolCallId"], "toolu_1", "{form}");
        assert_eq!(form["message"], "Claude has 2 questions for you.");
        let props = &form["requestedSchema"]["properties"];
        assert_eq!(props["0"]["type"], "string", "{props}");
        assert_eq!(props["0"]["title"], "Fruit");
        assert_eq!(props["0"]["description"], "Which fruit?");
        assert_eq!(
            props["0"]["oneOf"],
            json!([{"const": "Apple", "title": "Apple", "description": "red"},
                   {"const": "Banana", "title": "Banana"}])
        );
        assert_eq!(props["1"]["type"], "array", "{props}");
        assert_eq!(
            props["1"]["items"]["anyOf"],
            json!([{"const": "Cream", "title": "Cream"},
                   {"const": "Nuts, chopped", "title": "Nuts, chopped"}])
        );
        assert_eq!(props["0_other"]["type"], "string");
        assert_eq!(props["1_other"]["title"], "Other");
        let required = &form["requestedSchema"]["required"];
        assert!(
            required.is_null() || required == &json!([]),
            "nothing is required: {required}"
        );
    }

    #[test]
    fn one_question_is_the_form_message() {
        let one = claude_host_agent::questions::request(
            "t",
            &json!({"questions": [{"question": "Tabs or spaces?", "options": [{"label": "Tabs"}]}]}),
        );
        let form = serde_json::to_value(form_request("s", &one)).unwrap();
        assert_eq!(form["message"], "Tabs or spaces?");
        assert!(form["requestedSchema"]["properties"]["0"]["description"].is_null());
    }

    #[test]
    fn picks_and_free_text_become_answers() {
        let reply = form_reply(
            &two_questions(),
            accept(
                json!({"0": "Banana", "0_other": "  ", "1": ["Cream", "Nuts, chopped"], "1_other": "honey"}),
            ),
        );
        assert_eq!(reply.response, ChatInputResponseKind::Accept);
        assert_eq!(
            answer_texts(&reply),
            BTreeMap::from([
                ("0".to_owned(), Some("Banana".to_owned())),
                (
                    "1".to_owned(),
                    Some("Cream, \"Nuts, chopped\", honey".to_owned())
                ),
            ])
        );
        // Free text alone is the answer; a question left blank is not answered.
        let reply = form_reply(&two_questions(), accept(json!({"0_other": "Cherry"})));
        assert_eq!(
            answer_texts(&reply),
            BTreeMap::from([("0".to_owned(), Some("Cherry".to_owned()))])
        );
    }

    #[test]
    fn an_empty_declined_cancelled_or_failed_form_answers_nothing() {
        let q = two_questions();
        let empty = form_reply(&q, accept(json!({"0": "", "1": []})));
        assert_eq!(empty.response, ChatInputResponseKind::Decline);
        assert!(empty.answers.is_empty());
        let declined = form_reply(&q, Ok(ElicitationAction::Decline));
        assert_eq!(declined.response, ChatInputResponseKind::Decline);
        let cancelled = form_reply(&q, Ok(ElicitationAction::Cancel));
        assert_eq!(cancelled.response, ChatInputResponseKind::Cancel);
        let failed = form_reply(&q, Err(Error::method_not_found()));
        assert_eq!(failed.response, ChatInputResponseKind::Cancel);
        assert!(failed.answers.is_empty());
    }
}
