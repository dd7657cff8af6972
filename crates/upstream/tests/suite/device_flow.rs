use claude_host_testkit::fake::{DeviceOutcome, FakeConfig, FakeUpstream};
use claude_host_upstream::device_flow::{DEFAULT_CLIENT_ID, DeviceFlow, LoginError, PollProgress};
use claude_host_upstream::http_client;
use std::time::Duration;

async fn run(config: FakeConfig) -> (Result<String, LoginError>, Vec<PollProgress>) {
    let fake = FakeUpstream::start_with(config).await.unwrap();
    let flow = DeviceFlow::new(
        http_client().unwrap(),
        &fake.url(),
        DEFAULT_CLIENT_ID,
        "read:user",
    )
    .with_slow_down_step(Duration::from_millis(20));
    let code = flow.request_code().await.unwrap();
    assert!(!code.user_code.is_empty());
    assert!(code.verification_uri.ends_with("/login/device"));
    let mut progress = Vec::new();
    let r = flow
        .poll(&code, |p| progress.push(p))
        .await
        .map(|t| t.access_token);
    (r, progress)
}

#[tokio::test]
async fn pending_then_success() {
    let (r, progress) = run(FakeConfig {
        device_flow_pending_polls: 2,
        ..FakeConfig::default()
    })
    .await;
    assert_eq!(r.unwrap(), "gho_fake_github_token");
    assert_eq!(
        progress,
        vec![PollProgress::Pending(1), PollProgress::Pending(2)]
    );
}

#[tokio::test]
async fn slow_down_adds_to_the_interval() {
    let (r, progress) = run(FakeConfig {
        device_flow_pending_polls: 0,
        device_flow_outcome: DeviceOutcome::SlowDownOnce,
        ..FakeConfig::default()
    })
    .await;
    assert!(r.is_ok());
    assert_eq!(
        progress,
        vec![PollProgress::SlowDown(Duration::from_millis(20))]
    );
}

#[tokio::test]
async fn denied_and_expired_are_clear_errors() {
    let (r, _) = run(FakeConfig {
        device_flow_outcome: DeviceOutcome::AccessDenied,
        ..FakeConfig::default()
    })
    .await;
    assert!(matches!(r, Err(LoginError::AccessDenied)), "{r:?}");
    let (r, _) = run(FakeConfig {
        device_flow_outcome: DeviceOutcome::Expired,
        ..FakeConfig::default()
    })
    .await;
    let err = r.unwrap_err();
    assert!(matches!(err, LoginError::Expired));
    assert!(err.to_string().contains("claude-host login"));
}
