use super::*;

fn config(listen: &str) -> Config {
    Config {
        listen: listen.parse().unwrap(),
        ..Config::defaults()
    }
}

#[test]
fn reads_are_open_on_loopback_without_a_credential() {
    let access = ViewerAccess::from_config(&config("127.0.0.1:8080")).unwrap();
    assert!(!access.is_guarded());
    assert_eq!(access.check(None, None, None), Ok(Viewer::Anyone));
    let access = ViewerAccess::from_config(&config("[::1]:8080")).unwrap();
    assert!(!access.is_guarded());
}

#[test]
fn a_non_loopback_listener_without_a_credential_is_refused_naming_the_flags() {
    let error = ViewerAccess::from_config(&config("0.0.0.0:8080")).unwrap_err();
    let text = error.to_string();
    for flag in [
        "--viewer-token",
        "--trusted-proxy-header",
        "--trusted-proxy-cidrs",
        "--allow-anonymous-read",
        "0.0.0.0:8080",
    ] {
        assert!(text.contains(flag), "{flag} missing from {text:?}");
    }
    // The admin token alone does not turn reading off for everyone else.
    let mut with_admin = config("0.0.0.0:8080");
    with_admin.admin_token = Some("admin".into());
    assert!(ViewerAccess::from_config(&with_admin).is_err());
    let mut opted_out = config("0.0.0.0:8080");
    opted_out.allow_anonymous_read = true;
    assert!(!ViewerAccess::from_config(&opted_out).unwrap().is_guarded());
}

#[test]
fn the_viewer_and_admin_tokens_grant_reading_as_bearer_or_basic_password() {
    let mut c = config("0.0.0.0:8080");
    c.viewer_token = Some("view".into());
    c.admin_token = Some("boss".into());
    let access = ViewerAccess::from_config(&c).unwrap();
    assert!(access.is_guarded());
    assert_eq!(
        access.check(Some("Bearer view"), None, None),
        Ok(Viewer::Token)
    );
    assert_eq!(
        access.check(Some("bearer boss"), None, None),
        Ok(Viewer::Token)
    );
    // "anyone:view" and "x:boss" in base64.
    assert_eq!(
        access.check(Some("Basic YW55b25lOnZpZXc="), None, None),
        Ok(Viewer::Token)
    );
    assert_eq!(
        access.check(Some("Basic eDpib3Nz"), None, None),
        Ok(Viewer::Token)
    );
    // "view:nope": the token as the user name is not the password.
    assert!(
        access
            .check(Some("Basic dmlldzpub3Bl"), None, None)
            .is_err()
    );
    for wrong in [
        "Bearer vie",
        "Bearer view2",
        "Token view",
        "Basic !!!",
        "Bearer",
        "",
    ] {
        assert!(access.check(Some(wrong), None, None).is_err(), "{wrong:?}");
    }
    assert!(access.check(None, None, None).is_err());
}

#[test]
fn the_proxy_header_counts_only_from_its_trusted_sources() {
    let mut c = config("0.0.0.0:8080");
    c.trusted_proxy_header = Some("X-Forwarded-User".into());
    c.trusted_proxy_cidrs = vec!["10.0.0.0/8".parse().unwrap()];
    let access = ViewerAccess::from_config(&c).unwrap();
    let inside = Some("10.1.2.3".parse().unwrap());
    let outside = Some("192.168.1.1".parse().unwrap());
    assert_eq!(
        access.check(None, Some("alice"), inside),
        Ok(Viewer::Proxied("alice".into()))
    );
    assert!(access.check(None, Some("alice"), outside).is_err());
    assert!(access.check(None, Some("  "), inside).is_err());
    assert!(access.check(None, Some("alice"), None).is_err());
}

#[test]
fn a_proxy_header_without_sources_or_with_a_bad_name_is_refused() {
    let mut c = config("127.0.0.1:8080");
    c.trusted_proxy_header = Some("X-Forwarded-User".into());
    assert!(matches!(
        ViewerAccess::from_config(&c),
        Err(ViewerConfigError::NoProxySources)
    ));
    c.trusted_proxy_cidrs = vec!["10.0.0.0/8".parse().unwrap()];
    c.trusted_proxy_header = Some("bad header".into());
    assert!(matches!(
        ViewerAccess::from_config(&c),
        Err(ViewerConfigError::HeaderName(_))
    ));
    let mut empty = config("127.0.0.1:8080");
    empty.viewer_token = Some(String::new());
    assert!(matches!(
        ViewerAccess::from_config(&empty),
        Err(ViewerConfigError::EmptyToken)
    ));
}

#[test]
fn probes_metrics_the_document_ingest_and_coordination_are_not_read_routes() {
    for open in [
        "/livez",
        "/readyz",
        "/metrics",
        "/api/v1/openapi.json",
        "/api/v1/docs",
    ] {
        assert_eq!(Route::of(open), Route::Open, "{open}");
    }
    for own in ["/api/v1/ingest", "/api/v1/coordination/leases/x/acquire"] {
        assert_eq!(Route::of(own), Route::OwnToken, "{own}");
    }
    for read in [
        "/",
        "/ui/",
        "/ui/assets/app.js",
        "/api/v1/clusters",
        "/api/v1/events/stream",
        "/api/v1/coordination",
        "/management/c/cluster/members",
        "/metrics/",
        "/nowhere",
    ] {
        assert_eq!(Route::of(read), Route::Read, "{read}");
    }
}

#[test]
fn base64_decodes_as_rfc_4648_says() {
    for (text, plain) in [
        ("", ""),
        ("Zg==", "f"),
        ("Zm8=", "fo"),
        ("Zm9v", "foo"),
        ("Zm9vYg==", "foob"),
        ("Zm9vYmE=", "fooba"),
        ("Zm9vYmFy", "foobar"),
        ("Zm9vYmFy", "foobar"),
    ] {
        assert_eq!(base64_decode(text).unwrap(), plain.as_bytes(), "{text}");
    }
    assert!(base64_decode("Z").is_none());
    assert!(base64_decode("Zm9v!").is_none());
}
