use super::*;
use pretty_assertions::assert_eq;

async fn ok_request(e: &Env) {
    let resp = e.messages(request("hi", false)).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
}

#[tokio::test]
async fn hundred_concurrent_requests_with_an_expired_token_mint_once() {
    let e = env().await;
    ok_request(&e).await;
    assert_eq!(e.fake.mint_count(), 1);
    // Past the refresh time: the cached token must be replaced, once, for everyone.
    e.clock.advance(3600);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let http = e.http.clone();
            let url = e.url("/v1/messages");
            let bearer = e.bearer();
            tokio::spawn(async move {
                http.post(url)
                    .header("authorization", bearer)
                    .json(&request("hi", false))
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(e.fake.mint_count(), 2);
    let tokens: std::collections::HashSet<String> = e.fake.message_requests()[1..]
        .iter()
        .map(|r| r.header("authorization").unwrap().to_owned())
        .collect();
    assert_eq!(tokens.len(), 1, "all 100 requests used the one new token");
}

#[tokio::test]
async fn a_caller_giving_up_does_not_cancel_the_shared_mint() {
    let e = env().await;
    let release = e.fake.hold_mints();
    let copilot = e.copilot.clone();
    let first = tokio::spawn(async move { copilot.token().await });
    // The first caller's mint has reached GitHub, which holds it there.
    e.fake.wait_mints(1, Duration::from_secs(10)).await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let mut second = std::pin::pin!(e.copilot.token());
    // One poll runs the second caller up to its wait: it joins the mint in flight, which
    // cannot have finished (GitHub still holds it).
    assert!(futures::poll!(second.as_mut()).is_pending());
    release.open();
    let tok = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("the second caller never got a token")
        .unwrap();
    assert_eq!(e.fake.mint_count(), 1);
    assert!(tok.token.starts_with("tid=1;"), "{}", tok.token);
    assert_eq!(tok.token, e.fake.current_copilot_token());
}

#[tokio::test]
async fn a_401_from_copilot_re_mints_and_retries_once() {
    let e = env().await;
    ok_request(&e).await;
    assert_eq!(e.fake.mint_count(), 1);
    e.fake.reject_next_messages_with_401(1);
    ok_request(&e).await;
    assert_eq!(e.fake.mint_count(), 2);
    assert_eq!(e.fake.message_requests().len(), 3);
    // Twice in a row: one retry only, then the 401 reaches the client.
    e.fake.reject_next_messages_with_401(2);
    let resp = e.messages(request("hi", false)).await;
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    assert_eq!(e.fake.message_requests().len(), 5);
    assert_eq!(e.fake.mint_count(), 3);
}

#[tokio::test]
async fn the_token_is_refreshed_before_it_expires() {
    let e = env().await;
    e.fake.set_token_ttl(1800, 1500);
    let t1 = e.copilot.token().await.unwrap();
    assert!(t1.refresh_at < t1.expires_at);
    // Just before the refresh point the cached token is reused.
    e.clock.advance(1500 - 60 - 5);
    let t2 = e.copilot.token().await.unwrap();
    assert_eq!(t1.token, t2.token);
    assert_eq!(e.fake.mint_count(), 1);
    // Past it, and still well before expiry, a new one is minted.
    e.clock.advance(10);
    let t3 = e.copilot.token().await.unwrap();
    assert_ne!(t1.token, t3.token);
    assert_eq!(e.fake.mint_count(), 2);
    assert!(e.clock.now_unix() < t1.expires_at);
}

#[tokio::test]
async fn mint_failures_are_classified() {
    let e = env().await;
    e.fake
        .fail_next_mints(503, json!({"message": "unavailable"}), 2);
    let tok = e.copilot.token().await.unwrap();
    assert!(!tok.token.is_empty());
    assert_eq!(
        e.fake.mint_count(),
        3,
        "two transient failures retried, then success"
    );

    let e = env().await;
    e.fake
        .fail_next_mints(401, json!({"message": "Bad credentials"}), 1);
    let resp = e.messages(request("hi", true)).await;
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("claude-host login"),
        "{body}"
    );
    assert_eq!(
        e.fake.mint_count(),
        1,
        "a rejected credential is not retried"
    );

    let e = env().await;
    e.fake.fail_next_mints(
        403,
        json!({"message": "Copilot subscription ended", "notification_id": "subscription_ended"}),
        1,
    );
    let resp = e.messages(request("hi", true)).await;
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "permission_error");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("no GitHub Copilot access") && msg.contains("subscription_ended"),
        "{msg}"
    );
    assert!(e.fake.message_requests().is_empty());
}
