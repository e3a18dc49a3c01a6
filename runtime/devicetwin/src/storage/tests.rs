use std::collections::BTreeMap;

use wedge_core::Store;
use wedge_core::store::StoreOptions;

use super::*;

fn side(value: &str, ts: i64) -> Option<TwinValue> {
    Some(TwinValue {
        value: Some(value.to_owned()),
        metadata: Some(ValueMetadata { timestamp: ts }),
    })
}

fn thermo() -> DeviceRecord {
    let mut twins = BTreeMap::new();
    twins.insert(
        "temperature".to_owned(),
        StoredTwin {
            expected: side("25", 1_700_000_000_000),
            actual: side("", 1_700_000_000_001),
            expected_version: Some(Version { cloud: 1, edge: 0 }),
            actual_version: Some(Version { cloud: 0, edge: 3 }),
            optional: true,
            attr_type: "int".to_owned(),
        },
    );
    twins.insert(
        "gone".to_owned(),
        StoredTwin {
            expected_version: Some(Version { cloud: 0, edge: 1 }),
            actual_version: Some(Version { cloud: 0, edge: 1 }),
            optional: true,
            attr_type: "deleted".to_owned(),
            ..StoredTwin::default()
        },
    );
    let mut attributes = BTreeMap::new();
    attributes.insert(
        "vendor".to_owned(),
        StoredAttr {
            description: "maker".to_owned(),
            value: "acme".to_owned(),
            optional: false,
            attr_type: "string".to_owned(),
        },
    );
    DeviceRecord {
        id: "default/thermo-1".to_owned(),
        name: "thermo-1".to_owned(),
        description: "a thermometer".to_owned(),
        state: "online".to_owned(),
        last_online: "2023-11-14T22:13:20Z".to_owned(),
        attributes,
        twins,
    }
}

async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("edgecore.db"), StoreOptions::default()).unwrap();
    store.migrate(COMPONENT, MIGRATIONS).await.unwrap();
    (dir, store)
}

async fn apply_all(store: &Store, changes: Vec<RowChange>) {
    store.write(move |c| apply(c, &changes)).await.unwrap();
}

async fn loaded(store: &Store) -> Devices {
    store.read(load_all).await.unwrap()
}

#[tokio::test]
async fn a_device_round_trips_with_empty_values_and_deleted_twins() {
    let (_dir, store) = store().await;
    apply_all(&store, vec![RowChange::PutDevice(thermo())]).await;
    let devices = loaded(&store).await;
    assert_eq!(devices.len(), 1);
    assert_eq!(devices["default/thermo-1"], thermo());
}

#[tokio::test]
async fn twin_state_and_attribute_rows_change_one_at_a_time() {
    let (_dir, store) = store().await;
    apply_all(&store, vec![RowChange::PutDevice(thermo())]).await;
    let mut twin = thermo().twins["temperature"].clone();
    twin.actual = side("22", 1_700_000_000_100);
    twin.actual_version = Some(Version { cloud: 0, edge: 4 });
    apply_all(
        &store,
        vec![
            RowChange::PutTwin {
                device: "default/thermo-1".into(),
                key: "temperature".into(),
                twin: twin.clone(),
            },
            RowChange::DeleteTwin {
                device: "default/thermo-1".into(),
                key: "gone".into(),
            },
            RowChange::PutState {
                device: "default/thermo-1".into(),
                state: "offline".into(),
                last_online: String::new(),
            },
            RowChange::DeleteAttr {
                device: "default/thermo-1".into(),
                name: "vendor".into(),
            },
            RowChange::PutAttr {
                device: "default/thermo-1".into(),
                name: "model".into(),
                attr: StoredAttr {
                    value: "t1000".into(),
                    ..StoredAttr::default()
                },
            },
        ],
    )
    .await;
    let d = loaded(&store).await.remove("default/thermo-1").unwrap();
    assert_eq!(d.twins.len(), 1);
    assert_eq!(d.twins["temperature"], twin);
    assert_eq!((d.state.as_str(), d.last_online.as_str()), ("offline", ""));
    assert_eq!(d.attributes.keys().collect::<Vec<_>>(), vec!["model"]);
    let rows: i64 = store
        .read(|c| Ok(c.query_row("SELECT count(*) FROM device_twin", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(rows, 1, "an upsert replaces the row, it does not add one");
}

#[tokio::test]
async fn deleting_a_device_removes_rows_in_all_three_tables() {
    let (_dir, store) = store().await;
    let mut other = thermo();
    other.id = "dev-legacy".to_owned();
    apply_all(
        &store,
        vec![RowChange::PutDevice(thermo()), RowChange::PutDevice(other)],
    )
    .await;
    apply_all(
        &store,
        vec![RowChange::DeleteDevice {
            device: "default/thermo-1".into(),
        }],
    )
    .await;
    let counts: (i64, i64, i64) = store
        .read(|c| {
            let count = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0));
            Ok((
                count("SELECT count(*) FROM device")?,
                count("SELECT count(*) FROM device_attr")?,
                count("SELECT count(*) FROM device_twin")?,
            ))
        })
        .await
        .unwrap();
    assert_eq!(counts, (1, 1, 2));
    assert!(
        store
            .read(|c| load_device(c, "dev-legacy"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .read(|c| load_device(c, "default/thermo-1"))
            .await
            .unwrap()
            .is_none()
    );
}
