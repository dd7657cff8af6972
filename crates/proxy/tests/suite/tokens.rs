use super::*;
use pretty_assertions::assert_eq;

async fn ok_request(e: &Env) {
    let resp = e.messages(request("hi", false)).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
}

/// Issue 16's fault suite: a thousand requests arrive while the token is past its refresh
/// time and the one mint is held at GitHub: all wait for it, none fails, and all use the new
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_requests_across_a_token_expiry_mint_once() {
    const REQUESTS: usize = 1000;
    let e = env().await;
    ok_request(&e).await;
    assert_eq!(e.fake.mint_count(), 1);
    let release = e.fake.hold_mints();
    e.clock.advance(3600);
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let http = e.http.clone();
            let url = e.url("/v1/messages");
            let bearer = e.bearer();
            tokio::spawn(async move {
                let resp = http
                    .post(url)
                    .header("authorization", bearer)
                    .json(&request("hi", false))
                    .send()
                    .await
                    .unwrap();
                (resp.status(), resp.text().await.unwrap())
            })
        })
        .collect();
    // Every request is in the proxy, waiting on the one mint that GitHub holds.
    e.fake.wait_mints(2, Duration::from_secs(30)).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while e.proxy.active_requests() < REQUESTS {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {REQUESTS} requests reached the proxy",
            e.proxy.active_requests()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        e.fake.message_requests().len(),
        1,
        "none went out with the old token"
    );
    release.open();
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(e.fake.mint_count(), 2);
    let sent = e.fake.message_requests();
    assert_eq!(sent.len(), REQUESTS + 1);
    let tokens: std::collections::HashSet<&str> = sent[1..]
        .iter()
        .map(|r| r.header("authorization").unwrap())
        .collect();
    assert_eq!(
        tokens.len(),
        1,
        "all {REQUESTS} requests used the one new token"
    );
    assert!(
        !tokens.contains(sent[0].header("authorization").unwrap()),
        "the new token is not the expired one"
    );
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
