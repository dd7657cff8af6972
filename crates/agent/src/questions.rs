//! Claude's `AskUserQuestion` as an AHP input request, and the client's answers back into the
//! tool input the CLI expects (answers keyed by question text).

use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputMultiSelectQuestion, ChatInputOption,
    ChatInputQuestion, ChatInputRequest, ChatInputSingleSelectQuestion,
};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::HashMap;

#[derive(Deserialize)]
struct AskInput {
    #[serde(default)]
    questions: Vec<AskQuestion>,
}

#[derive(Deserialize)]
struct AskQuestion {
    #[serde(default)]
    question: String,
    #[serde(default)]
    header: Option<String>,
    #[serde(default, rename = "multiSelect")]
    multi_select: bool,
    #[serde(default)]
    options: Vec<AskOption>,
}

#[derive(Deserialize)]
struct AskOption {
    label: String,
    #[serde(default)]
    description: Option<String>,
}

fn parse(input: &Value) -> AskInput {
    AskInput::deserialize(input).unwrap_or(AskInput {
        questions: Vec::new(),
    })
}

/// The input request for an `AskUserQuestion` call; question ids are their positions.
pub fn request(id: &str, input: &Value) -> ChatInputRequest {
    let questions = parse(input)
        .questions
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let options = q
                .options
                .into_iter()
                .map(|o| ChatInputOption {
                    id: o.label.clone(),
                    label: o.label,
                    description: o.description,
                    recommended: None,
                })
                .collect();
            if q.multi_select {
                ChatInputQuestion::MultiSelect(ChatInputMultiSelectQuestion {
                    id: i.to_string(),
                    title: q.header,
                    message: q.question,
                    required: Some(true),
                    options,
                    // Claude offers "Other" on every question.
                    allow_freeform_input: Some(true),
                    min: None,
                    max: None,
                })
            } else {
                ChatInputQuestion::SingleSelect(ChatInputSingleSelectQuestion {
                    id: i.to_string(),
                    title: q.header,
                    message: q.question,
                    required: Some(true),
                    options,
                    allow_freeform_input: Some(true),
                })
            }
        })
        .collect();
    ChatInputRequest {
        id: id.to_owned(),
        message: None,
        url: None,
        questions: Some(questions),
        answers: None,
    }
}

/// The text the CLI expects for one answer (`None` for a skipped question).
pub fn answer_text(answer: &ChatInputAnswer) -> Option<String> {
    let value = match answer {
        ChatInputAnswer::Submitted(a) | ChatInputAnswer::Draft(a) => &a.value,
        ChatInputAnswer::Skipped(_) => return None,
    };
    let with_freeform = |mut picked: Vec<String>, free: &Option<Vec<String>>| {
        picked.extend(free.iter().flatten().filter(|f| !f.is_empty()).cloned());
        picked.join(", ")
    };
    // The CLI splits a multi-select answer at ", ", reading a JSON-quoted item as one: an item
    // that holds the separator or a quote is quoted so that it stays one.
    let quoted = |items: Vec<String>| -> Vec<String> {
        items
            .into_iter()
            .map(|i| {
                if i.contains(", ") || i.contains('"') {
                    Value::String(i).to_string()
                } else {
                    i
                }
            })
            .collect()
    };
    Some(match value {
        ChatInputAnswerValue::Text(t) => t.value.clone(),
        ChatInputAnswerValue::Number(n) => n.value.to_string(),
        ChatInputAnswerValue::Boolean(b) => if b.value { "Yes" } else { "No" }.to_owned(),
        ChatInputAnswerValue::Selected(s) => {
            let picked = if s.value.is_empty() {
                Vec::new()
            } else {
                vec![s.value.clone()]
            };
            with_freeform(picked, &s.freeform_values)
        }
        ChatInputAnswerValue::SelectedMany(s) => with_freeform(
            quoted(s.value.clone()),
            &s.freeform_values.clone().map(quoted),
        ),
        ChatInputAnswerValue::Unknown(v) => v.to_string(),
    })
}

/// The tool input with the answers added, keyed by question text.
pub fn answered_input(input: Value, answers: &HashMap<String, ChatInputAnswer>) -> Value {
    let mut by_text = Map::new();
    for (i, q) in parse(&input).questions.iter().enumerate() {
        if let Some(a) = answers.get(&i.to_string()).and_then(answer_text) {
            by_text.insert(q.question.clone(), Value::String(a));
        }
    }
    let mut updated = input;
    if let Value::Object(m) = &mut updated {
        m.insert("answers".into(), Value::Object(by_text));
    }
    updated
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{ChatInputAnswered, ChatInputSelectedManyAnswerValue};
    use serde_json::json;

    #[test]
    fn questions_and_answers_round_trip() {
        let input = json!({"questions": [
            {"question": "Which?", "header": "Pick", "multiSelect": true,
             "options": [{"label": "A"}, {"label": "B", "description": "bee"}]}]});
        let r = request("toolu_1", &input);
        let q = serde_json::to_value(&r.questions.unwrap()[0]).unwrap();
        assert_eq!(q["kind"], "multi-select");
        assert_eq!(q["title"], "Pick");
        assert_eq!(q["options"][1]["description"], "bee");
        let answers = HashMap::from([(
            "0".to_owned(),
            ChatInputAnswer::Submitted(ChatInputAnswered {
                value: ChatInputAnswerValue::SelectedMany(ChatInputSelectedManyAnswerValue {
                    value: vec!["A".into()],
                    freeform_values: Some(vec!["C".into()]),
                }),
            }),
        )]);
        let out = answered_input(input.clone(), &answers);
        assert_eq!(out["answers"]["Which?"], "A, C");
        let answers = HashMap::from([(
            "0".to_owned(),
            ChatInputAnswer::Submitted(ChatInputAnswered {
                value: ChatInputAnswerValue::SelectedMany(ChatInputSelectedManyAnswerValue {
                    value: vec!["A, or B".into(), "say \"B\"".into()],
                    freeform_values: Some(vec!["C, D".into()]),
                }),
            }),
        )]);
        let out = answered_input(input, &answers);
        assert_eq!(
            out["answers"]["Which?"], r#""A, or B", "say \"B\"", "C, D""#,
            "an item with the separator or a quote stays one item"
        );
    }
}
