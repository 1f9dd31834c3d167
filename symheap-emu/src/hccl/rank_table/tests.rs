use super::*;

/// Two servers of two devices, version 1.0, as the A2 / A3 guides lay such a table out.
const TWO_SERVERS: &str = r#"{
  "status": "completed",
  "version": "1.0",
  "server_count": "2",
  "server_list": [
    {"server_id": "node_a", "host_ip": "10.0.0.1", "device": [
      {"device_id": "0", "device_ip": "10.1.0.1", "rank_id": "0"},
      {"device_id": "1", "device_ip": "10.1.0.2", "rank_id": "1"}]},
    {"server_id": "node_b", "device": [
      {"device_id": "1", "device_ip": "10.1.1.2", "rank_id": "3"},
      {"device_id": "0", "device_ip": "10.1.1.1", "rank_id": "2"}]}
  ]
}"#;

/// Four servers of one device in two SuperPoDs, version 1.2.
const SUPER_PODS: &str = r#"{
  "status": "completed", "version": "1.2",
  "server_list": [
    {"server_id": "s0", "device": [{"device_id": "0", "super_device_id": "0", "rank_id": "0"}]},
    {"server_id": "s1", "device": [{"device_id": "0", "super_device_id": "1", "rank_id": "1"}]},
    {"server_id": "s2", "device": [{"device_id": "0", "super_device_id": "0", "rank_id": "2"}]},
    {"server_id": "s3", "device": [{"device_id": "0", "super_device_id": "1", "rank_id": "3"}]}
  ],
  "super_pod_list": [
    {"super_pod_id": "pod_x", "server_list": [{"server_id": "s0"}, {"server_id": "s1"}]},
    {"super_pod_id": "pod_y", "server_list": [{"server_id": "s2"}, {"server_id": "s3"}]}
  ]
}"#;

fn load(text: &str) -> HcclRes<RankTable> {
    let doc = completed(text)?.expect("a completed table");
    parse(&doc, 16)
}

fn code(r: HcclRes<impl std::fmt::Debug>) -> (HcclResult, String) {
    let e = r.expect_err("the table must be refused");
    (e.code, e.msg)
}

#[test]
fn a_table_of_servers_gives_each_rank_its_device_node_and_super_pod() {
    let table = load(TWO_SERVERS).unwrap();
    assert_eq!(table.servers, ["node_a", "node_b"]);
    assert_eq!(table.super_pods, None);
    let ranks: Vec<_> = table
        .ranks
        .iter()
        .map(|r| (r.rank, r.device, r.server))
        .collect();
    assert_eq!(ranks, [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]);
    assert_eq!(table.ranks[3].device_ips, ["10.1.1.2"]);
    // Without super_pod_list, node k is in SuperPoD k / nodes_per_super_pod.
    let pods: Vec<_> = table
        .places(1)
        .iter()
        .map(|p| (p.node, p.super_pod))
        .collect();
    assert_eq!(pods, [(0, 0), (0, 0), (1, 1), (1, 1)]);
    let pods: Vec<_> = table.places(24).iter().map(|p| p.super_pod).collect();
    assert_eq!(pods, [0, 0, 0, 0]);
    for rank in 0..4 {
        table
            .check_rank(rank, table.ranks[rank as usize].device)
            .unwrap();
    }
}

#[test]
fn a_super_pod_list_places_each_server_in_its_super_pod() {
    let table = load(SUPER_PODS).unwrap();
    assert_eq!(
        table.super_pods.as_deref(),
        Some(&["pod_x".to_owned(), "pod_y".to_owned()][..])
    );
    // super_pod_list wins over nodes_per_super_pod.
    let places = table.places(24);
    let got: Vec<_> = places
        .iter()
        .map(|p| (p.rank, p.device, p.node, p.super_pod))
        .collect();
    assert_eq!(
        got,
        [(0, 0, 0, 0), (1, 0, 1, 0), (2, 0, 2, 1), (3, 0, 3, 1)]
    );
    // Version 1.0 ignores a super_pod_list, as CANN does.
    let v10 = load(&SUPER_PODS.replace("\"1.2\"", "\"1.0\"")).unwrap();
    assert_eq!(v10.super_pods, None);
    assert_eq!(
        v10.places(2)
            .iter()
            .map(|p| p.super_pod)
            .collect::<Vec<_>>(),
        [0, 0, 1, 1]
    );
}

#[test]
fn a_table_not_yet_completed_or_not_loadable_is_told_apart() {
    let pending = TWO_SERVERS.replace("completed", "initializing");
    assert!(completed(&pending).unwrap().is_none());
    let (c, m) = code(completed(
        &TWO_SERVERS.replace("\"status\": \"completed\",", ""),
    ));
    assert_eq!(c, HcclResult::HCCL_E_INTERNAL);
    assert!(m.contains("no \"status\""), "{m}");
    let (c, m) = code(completed(&TWO_SERVERS.replace("\"completed\"", "1")));
    assert_eq!(c, HcclResult::HCCL_E_INTERNAL);
    assert!(m.contains("\"status\" is a number"), "{m}");
    let (c, m) = code(completed(&TWO_SERVERS.replace("\"2\",", "\"2\"")));
    assert_eq!(c, HcclResult::HCCL_E_INTERNAL);
    assert!(m.contains("not JSON: line 5"), "{m}");
}

#[test]
fn each_fault_of_a_table_gets_cannes_code_and_a_message_naming_it() {
    let cases: &[(&str, &str, HcclResult, &str)] = &[
        (
            "\"version\": \"1.0\",",
            "",
            HcclResult::HCCL_E_NOT_SUPPORT,
            "no \"version\"",
        ),
        (
            "\"1.0\"",
            "\"3.0\"",
            HcclResult::HCCL_E_NOT_SUPPORT,
            "version \"3.0\"",
        ),
        (
            "\"1.0\"",
            "\"2.0\"",
            HcclResult::HCCL_E_NOT_SUPPORT,
            "Ascend 950",
        ),
        (
            "\"1.0\"",
            "\"1.1\"",
            HcclResult::HCCL_E_NOT_SUPPORT,
            "heterogeneous",
        ),
        (
            "\"1.0\"",
            "1.0",
            HcclResult::HCCL_E_PARA,
            "\"version\" is a number",
        ),
        (
            "\"server_count\": \"2\"",
            "\"server_count\": \"3\"",
            HcclResult::HCCL_E_PARA,
            "\"server_count\" is 3",
        ),
        (
            "\"server_count\": \"2\"",
            "\"server_count\": 2",
            HcclResult::HCCL_E_PARA,
            "\"server_count\" is a number",
        ),
        (
            "\"server_count\": \"2\"",
            "\"server_count\": \"two\"",
            HcclResult::HCCL_E_PARA,
            "not a non-negative decimal",
        ),
        (
            "server_list",
            "servers",
            HcclResult::HCCL_E_NOT_FOUND,
            "\"server_list\" is missing",
        ),
        (
            "\"server_id\": \"node_b\"",
            "\"server_id\": \"node_a\"",
            HcclResult::HCCL_E_PARA,
            "\"node_a\" appears twice",
        ),
        (
            "\"server_id\": \"node_b\"",
            "\"server_id\": \"\"",
            HcclResult::HCCL_E_PARA,
            "1 to 64 characters",
        ),
        (
            "\"server_id\": \"node_b\", ",
            "",
            HcclResult::HCCL_E_NOT_FOUND,
            "server_list[1]: \"server_id\" is missing",
        ),
        (
            "\"10.0.0.1\"",
            "\"10.0.0.300\"",
            HcclResult::HCCL_E_PARA,
            "\"host_ip\" \"10.0.0.300\"",
        ),
        (
            "\"rank_id\": \"3\"",
            "\"rank_id\": 3",
            HcclResult::HCCL_E_PARA,
            "\"rank_id\" is a number",
        ),
        (
            "\"rank_id\": \"3\"",
            "\"rank_id\": \"-3\"",
            HcclResult::HCCL_E_PARA,
            "\"rank_id\" is \"-3\"",
        ),
        (
            ", \"rank_id\": \"3\"",
            "",
            HcclResult::HCCL_E_NOT_FOUND,
            "device[0]: \"rank_id\" is missing",
        ),
        (
            "\"device_id\": \"1\", \"device_ip\": \"10.1.1.2\"",
            "\"device_ip\": \"10.1.1.2\"",
            HcclResult::HCCL_E_NOT_FOUND,
            "\"device_id\" is missing",
        ),
        (
            "\"device_id\": \"1\", \"device_ip\": \"10.1.1.2\"",
            "\"device_id\": \"16\", \"device_ip\": \"10.1.1.2\"",
            HcclResult::HCCL_E_PARA,
            "device_id\" 16 is not a device",
        ),
        (
            "\"device_id\": \"1\", \"device_ip\": \"10.1.1.2\"",
            "\"device_id\": \"0\", \"device_ip\": \"10.1.1.2\"",
            HcclResult::HCCL_E_PARA,
            "which rank 3 has already",
        ),
        (
            "\"10.1.1.2\"",
            "\"10.1.0.2\"",
            HcclResult::HCCL_E_PARA,
            "10.1.0.2 appears twice",
        ),
        (
            "\"10.1.1.2\"",
            "\"fe80::1,10.1.0.1\"",
            HcclResult::HCCL_E_PARA,
            "10.1.0.1 appears twice",
        ),
        (
            "\"10.1.1.2\"",
            "\"not-an-ip\"",
            HcclResult::HCCL_E_PARA,
            "\"not-an-ip\" is not an IP",
        ),
    ];
    for (from, to, want, says) in cases {
        assert!(TWO_SERVERS.contains(from), "{from}");
        let (c, m) = code(load(&TWO_SERVERS.replacen(from, to, 1)));
        assert_eq!(c, *want, "{from} -> {to}: {m}");
        assert!(
            m.contains(says),
            "{from} -> {to}: {m:?} does not say {says:?}"
        );
    }
    let empty = r#"{"status": "completed", "version": "1.0", "server_list": []}"#;
    assert_eq!(code(load(empty)).0, HcclResult::HCCL_E_PARA);
    let no_devices = r#"{"status": "completed", "version": "1.0",
        "server_list": [{"server_id": "a", "device": []}]}"#;
    let (c, m) = code(load(no_devices));
    assert_eq!(
        (c, m.contains("\"device\" is empty")),
        (HcclResult::HCCL_E_PARA, true),
        "{m}"
    );
}

#[test]
fn each_fault_of_a_super_pod_list_gets_cannes_code() {
    let cases: &[(&str, &str, HcclResult, &str)] = &[
        (
            "\"pod_y\"",
            "\"pod_x\"",
            HcclResult::HCCL_E_PARA,
            "\"pod_x\" appears twice",
        ),
        (
            "\"pod_y\"",
            "\"\"",
            HcclResult::HCCL_E_PARA,
            "\"super_pod_id\" is empty",
        ),
        (
            "\"super_pod_id\": \"pod_y\", ",
            "",
            HcclResult::HCCL_E_NOT_FOUND,
            "\"super_pod_id\" is missing",
        ),
        (
            "{\"server_id\": \"s3\"}",
            "{\"server_id\": \"s9\"}",
            HcclResult::HCCL_E_NOT_FOUND,
            "\"s9\" is not in",
        ),
        (
            ", {\"server_id\": \"s3\"}",
            "",
            HcclResult::HCCL_E_PARA,
            "\"s3\" is in no SuperPoD",
        ),
        (
            "{\"server_id\": \"s3\"}",
            "{\"server_id\": \"s3\"}, {\"server_id\": \"s0\"}",
            HcclResult::HCCL_E_PARA,
            "\"s0\" is listed in 2",
        ),
        (
            "\"super_device_id\": \"1\", \"rank_id\": \"3\"",
            "\"rank_id\": \"3\"",
            HcclResult::HCCL_E_PARA,
            "rank 3: \"super_device_id\" is missing",
        ),
        (
            "\"super_device_id\": \"1\", \"rank_id\": \"3\"",
            "\"super_device_id\": \"0\", \"rank_id\": \"3\"",
            HcclResult::HCCL_E_PARA,
            "ranks 2 and 3 have the same",
        ),
        (
            "\"super_device_id\": \"1\", \"rank_id\": \"3\"",
            "\"super_device_id\": \"x\", \"rank_id\": \"3\"",
            HcclResult::HCCL_E_PARA,
            "\"super_device_id\" is \"x\"",
        ),
    ];
    for (from, to, want, says) in cases {
        assert!(SUPER_PODS.contains(from), "{from}");
        let (c, m) = code(load(&SUPER_PODS.replacen(from, to, 1)));
        assert_eq!(c, *want, "{from} -> {to}: {m}");
        assert!(
            m.contains(says),
            "{from} -> {to}: {m:?} does not say {says:?}"
        );
    }
}

#[test]
fn a_ranks_place_is_checked_in_cannes_order_with_its_codes() {
    let table = load(TWO_SERVERS).unwrap();
    let (c, m) = code(table.check_rank(4, 0));
    assert_eq!(
        (c, m.contains("has 4 ranks")),
        (HcclResult::HCCL_E_PARA, true),
        "{m}"
    );
    let (c, m) = code(table.check_rank(2, 1));
    assert_eq!(c, HcclResult::HCCL_E_UNAVAIL);
    assert!(
        m.contains("device_id 0 of server \"node_b\"") && m.contains("aclrtSetDevice(0)"),
        "{m}"
    );
    // Rank ids 0, 1, 3, 3: rank 2's position holds rank 3 (HcclResult::HCCL_E_UNAVAIL); rank 0 passes
    // its own checks, then the ids' continuity fails (HcclResult::HCCL_E_PARA).
    let dup = load(&TWO_SERVERS.replacen("\"rank_id\": \"2\"", "\"rank_id\": \"3\"", 1)).unwrap();
    let (c, m) = code(dup.check_rank(2, 0));
    assert_eq!(
        (c, m.contains("have 3 at position 2")),
        (HcclResult::HCCL_E_UNAVAIL, true),
        "{m}"
    );
    let (c, m) = code(dup.check_rank(0, 0));
    assert_eq!(
        (c, m.contains("rank_id 3 appears twice")),
        (HcclResult::HCCL_E_PARA, true),
        "{m}"
    );
    // Rank ids 0, 1, 2, 7: rank 3 is past the sorted ids' end at position 3, which holds 7.
    let gap = load(&TWO_SERVERS.replacen("\"rank_id\": \"3\"", "\"rank_id\": \"7\"", 1)).unwrap();
    assert_eq!(code(gap.check_rank(3, 1)).0, HcclResult::HCCL_E_UNAVAIL);
    let (c, m) = code(gap.check_rank(1, 1));
    assert_eq!(
        (c, m.contains("rank_id 3 is missing")),
        (HcclResult::HCCL_E_PARA, true),
        "{m}"
    );
}

#[test]
fn the_canonical_form_ignores_layout_but_not_contents() {
    let table = load(TWO_SERVERS).unwrap();
    let relaid = TWO_SERVERS
        .replace("\n", " ")
        .replace("\"server_count\": \"2\",", "")
        .replace("\"host_ip\": \"10.0.0.1\",", "")
        .replace(
            "{\"device_id\": \"0\", \"device_ip\": \"10.1.0.1\", \"rank_id\": \"0\"}",
            "{\"rank_id\": \"0\", \"device_ip\": \"10.1.0.1\", \"device_id\": \"0\"}",
        );
    assert_ne!(relaid, TWO_SERVERS);
    assert_eq!(load(&relaid).unwrap().canonical(), table.canonical());
    let other = load(&TWO_SERVERS.replace("node_b", "node_c")).unwrap();
    assert_ne!(other.canonical(), table.canonical());
    let moved = load(&TWO_SERVERS.replace("10.1.1.1", "10.1.1.9")).unwrap();
    assert_ne!(moved.canonical(), table.canonical());
}
