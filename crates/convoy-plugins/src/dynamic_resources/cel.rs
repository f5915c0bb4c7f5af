//! The CEL environment of DRA device selectors, as upstream's
//! `k8s.io/dynamic-resource-allocation/cel` (`compile.go`).
//!
//! A selector sees one variable, `device`, with
//! - `device.driver`: the ResourceSlice's `spec.driver`;
//! - `device.attributes[domain][id]`: an attribute `a/b` is filed under domain
//!   `a` and id `b`, an unqualified one (`model`) under the driver's name;
//! - `device.capacity[domain][id]`: the capacities, as `quantity` values;
//! - `device.allowMultipleAllocations`: the device's flag (false when unset),
//!   which upstream declares when DRAConsumableCapacity is enabled.
//!
//! Looking up a domain that the device has nothing in yields an empty map, as
//! upstream's `mapper` does, so `"x" in device.attributes["unknown"]` is false;
//! looking up a missing id inside a domain is an error naming the id.
//!
//! Attribute values are `int`, `bool`, `string` and `semver`. The list-typed
//! attributes (`ints`, `bools`, `strings`, `versions`; alpha upstream, behind
//! DRAListTypeAttributes) are exposed as CEL lists of those, never refused.
//!
//! Beside the CEL standard library (macros `has`, `all`, `exists`,
//! `exists_one`, `map`, `filter`, and `size`, `startsWith`, `endsWith`,
//! `contains`, `matches`, `in`) the environment has:
//! - `cel.bind(x, init, expr)`, as cel-go's bindings extension;
//! - `x.includes(v)` of upstream's list-type attributes (membership in a
//!   list attribute, or equality with a scalar one);
//! - the string extension (`lowerAscii`, `upperAscii`, `split`, `replace`,
//!   `trim`, `substring`, `indexOf`, `join`, ...);
//! - cel-go's lists extension (`slice`, `flatten`, `distinct`, `reverse`,
//!   `sort`, `sortBy`, `lists.range`) and optional values (`m.?k`), as the
//!   crate provides them;
//! - Kubernetes' semver library: `semver(s)`, `semver(s, normalize)`,
//!   `isSemver(s)`, `isSemver(s, normalize)`, and on a semver `compareTo`,
//!   `isGreaterThan`, `isLessThan`, `major`, `minor`, `patch` and `==`;
//! - Kubernetes' quantity library: `quantity(s)`, `isQuantity(s)`, and on a
//!   quantity `compareTo`, `isGreaterThan`, `isLessThan`, `asInteger`,
//!   `asApproximateFloat`, `isInteger`, `sign`, `add`, `sub` (a quantity or
//!   an int) and `==`.
//!
//! Every evaluation runs under upstream's runtime cost limit
//! ([`COST_LIMIT`], `actual cost limit exceeded`): the compiled program is
//! rewritten once so that each function call and each comprehension charges
//! a per-thread budget ([`meter`]); see "Cost" below.
//!
//! What differs from upstream is written in `docs/dependencies.md` ("cel"):
//! there is no type checker (a selector that does not return a bool fails
//! when evaluated, not compiled), and the cost units approximate cel-go's.
//!
//! A [`CelDevice`] is built once per device of a ResourceSlice; evaluating a
//! [`DeviceSelector`] against it only binds the variable (no copy) and runs
//! the program.

use std::any::Any;
use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, operators,
};
use cel::common::traits::{Container, Indexer, Iterable, Sizer};
use cel::common::types::{
    self, CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelString, Kind, Type,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::parser::Macro;
use cel::{Context, Env, ExecutionError, Program, Value};
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};

/// The CEL environment shared by every selector: built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(build_env()));

/// How many compiled selectors a [`SelectorCache`] keeps, as upstream's
/// `cel.NewCache(10, ...)` in the DynamicResources plugin.
pub const SELECTOR_CACHE_SIZE: usize = 10;

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

/// A device as selectors see it (`device.driver`, `device.attributes`,
/// `device.capacity`), built once per device of a ResourceSlice and
/// evaluated many times.
#[derive(Debug)]
pub struct CelDevice {
    value: DeviceVal,
    /// An attribute or capacity that cannot be represented (an unparsable
    /// version, an attribute without a value): upstream fails every
    /// evaluation against such a device with this error.
    error: Option<String>,
}

impl CelDevice {
    /// Builds the CEL value of `device`; `driver` is the slice's
    /// `spec.driver`.
    pub fn new(driver: &str, device: &Device) -> Self {
        let mut error = None;
        let mut attributes: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>> =
            HashMap::new();
        for (name, attr) in device.attributes.iter().flatten() {
            match attribute_value(attr) {
                Ok(value) => {
                    let (domain, id) = parse_qualified_name(name, driver);
                    attributes
                        .entry(domain.to_string())
                        .or_default()
                        .insert(CelMapKey::from(id.to_string()), value);
                }
                Err(e) => {
                    error.get_or_insert_with(|| format!("attribute {name}: {e}"));
                }
            }
        }
        let mut capacity: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>> =
            HashMap::new();
        for (name, cap) in device.capacity.iter().flatten() {
            match Quantity::parse(&cap.value.0) {
                Ok(q) => {
                    let (domain, id) = parse_qualified_name(name, driver);
                    capacity
                        .entry(domain.to_string())
                        .or_default()
                        .insert(CelMapKey::from(id.to_string()), Box::new(q));
                }
                Err(e) => {
                    error.get_or_insert_with(|| format!("capacity {name}: {e}"));
                }
            }
        }
        CelDevice {
            value: DeviceVal {
                driver: CelString::from(driver.to_string()),
                allow_multiple_allocations: CelBool::from(
                    device.allow_multiple_allocations.unwrap_or(false),
                ),
                attributes: DomainMap::new(attributes),
                capacity: DomainMap::new(capacity),
            },
            error,
        }
    }
}

/// A compiled selector expression.
pub struct DeviceSelector {
    expression: String,
    /// The parsed program, rewritten by [`meter`] to charge its cost.
    metered: IdedExpr,
}

impl fmt::Debug for DeviceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSelector").field("expression", &self.expression).finish()
    }
}

impl DeviceSelector {
    /// Compiles `expression`. The error reads as upstream's
    /// (`compilation failed: ...`), with this parser's message.
    pub fn compile(expression: &str) -> Result<Self, String> {
        let program: Program =
            ENV.compile(expression).map_err(|e| format!("compilation failed: {e}"))?;
        let metered = meter(program.expression().clone());
        Ok(DeviceSelector { expression: expression.to_string(), metered })
    }

    /// Evaluates against `device`: `Ok(true/false)`, or `Err` with the runtime
    /// error when the expression fails (e.g. an unknown attribute id), does
    /// not return a bool, or costs more than [`COST_LIMIT`].
    pub fn matches(&self, device: &CelDevice) -> Result<bool, String> {
        if let Some(e) = &device.error {
            return Err(e.clone());
        }
        let mut ctx = Context::with_env(Arc::clone(&ENV));
        ctx.add_variable_as_val("device", Box::new(DeviceRef(&device.value)));
        BUDGET.with(|b| b.set(Some(COST_LIMIT)));
        let result = Value::resolve_val(&self.metered, &ctx);
        // A charge refused inside `a || b` or an optional index may have
        // been absorbed by the operator: the budget says whether one was.
        if BUDGET.with(Cell::get).is_none() {
            return Err(COST_EXCEEDED.to_string());
        }
        let result = result.map_err(runtime_error)?;
        match result.downcast_ref::<CelBool>() {
            Some(b) => Ok(*b.inner()),
            None => Err(format!("must evaluate to bool, not {}", result.get_type().name())),
        }
    }

    /// The source text.
    pub fn expression(&self) -> &str {
        &self.expression
    }
}

/// The message of a runtime error.
fn runtime_error(e: ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        e => e.to_string(),
    }
}

/// A bounded, thread-safe cache of compiled selectors by expression text, as
/// upstream's LRU of compiled programs (`cel.Cache`, [`SELECTOR_CACHE_SIZE`]
/// entries). Compile errors are not cached, as upstream.
#[derive(Default)]
pub struct SelectorCache {
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    /// Expression -> (selector, last use).
    entries: HashMap<String, (Arc<DeviceSelector>, u64)>,
    clock: u64,
}

impl SelectorCache {
    /// The compiled selector for `expression`, compiled on a miss.
    pub fn get(&self, expression: &str) -> Result<Arc<DeviceSelector>, String> {
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.clock += 1;
            let now = inner.clock;
            if let Some((selector, used)) = inner.entries.get_mut(expression) {
                *used = now;
                return Ok(Arc::clone(selector));
            }
        }
        // Compiled outside the lock: two threads may compile the same
        // expression once each, which is harmless.
        let selector = Arc::new(DeviceSelector::compile(expression)?);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.clock += 1;
        let now = inner.clock;
        if inner.entries.len() >= SELECTOR_CACHE_SIZE && !inner.entries.contains_key(expression) {
            let oldest =
                inner.entries.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                inner.entries.remove(&oldest);
            }
        }
        inner.entries.insert(expression.to_string(), (Arc::clone(&selector), now));
        Ok(selector)
    }

    /// How many selectors are cached.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).entries.len()
    }

    /// Whether no selector is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ---------------------------------------------------------------------------
// Cost
// ---------------------------------------------------------------------------

/// Upstream's limit on the runtime cost of one selector evaluation
/// (`resourceapi.CELSelectorExpressionMaxCost`).
pub const COST_LIMIT: u64 = 1_000_000;

/// cel-go's error when an evaluation goes over its cost limit.
const COST_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

/// The metering function wrapped around every charged call.
const CHARGE_CALL: &str = "@convoy_charge";
/// The metering function wrapped around every comprehension's range.
const CHARGE_RANGE: &str = "@convoy_charge_range";

thread_local! {
    /// Cost left to the evaluation running on this thread; `None` once a
    /// charge was refused (and every later one is).
    static BUDGET: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Takes `cost` from this thread's budget, or refuses (for good) when it is
/// not there.
fn charge(cost: u64) -> Result<(), ExecutionError> {
    BUDGET.with(|b| match b.get().and_then(|left| left.checked_sub(cost)) {
        Some(left) => {
            b.set(Some(left));
            Ok(())
        }
        None => {
            b.set(None);
            Err(ExecutionError::function_error("cost", COST_EXCEEDED))
        }
    })
}

/// What building `v` costs beyond the call: a tenth of a unit per byte of
/// a string (cel-go charges string operations a tenth of their size), a
/// unit per element of a list or map (what holds memory), nothing for a
/// scalar.
fn size_cost(v: &dyn Val) -> u64 {
    if let Some(s) = v.downcast_ref::<CelString>() {
        return s.inner().len() as u64 / 10;
    }
    elements(v)
}

/// The elements of a list or map (the characters of a string), 0 for a
/// scalar.
fn elements(v: &dyn Val) -> u64 {
    v.as_sizer().map_or(0, |s| u64::try_from(*s.size().inner()).unwrap_or(0))
}

/// `@convoy_charge(x)`: `x`, after charging one unit plus [`size_cost`].
fn charge_call<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let value = args
        .into_iter()
        .next()
        .ok_or_else(|| ExecutionError::function_error(CHARGE_CALL, "expected one argument"))?;
    charge(1 + size_cost(value.as_ref()))?;
    Ok(value)
}

/// `@convoy_charge_range(x)`: `x`, after charging one unit per element (per
/// iteration of the comprehension over it).
fn charge_range<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let value = args
        .into_iter()
        .next()
        .ok_or_else(|| ExecutionError::function_error(CHARGE_RANGE, "expected one argument"))?;
    charge(1 + elements(value.as_ref()))?;
    Ok(value)
}

/// Rewrites a parsed expression so that evaluating it charges its cost:
/// every function call becomes `@convoy_charge(call)` and every
/// comprehension's range `@convoy_charge_range(range)`. Not charged, as in
/// cel-go: literals, names and field selections (bounded by the expression's
/// own size per evaluation of the enclosing call or iteration), `&&`, `||`
/// and `?:`, and a macro's own bookkeeping (calls on its accumulator
/// `@result`, a name CEL source cannot spell), which the crate recognises by
/// shape to run `map` and `filter` in linear time: those stay as they are,
/// their operands are charged. (`cel.bind`'s accumulator is the user's
/// variable: calls on it are charged.)
///
/// So every unit of work is paid for: each iteration through its range,
/// each call once per evaluation, and every value that grows (`lists.range`,
/// concatenation, `cel.bind` of a doubling string) by its size when built.
fn meter(mut e: IdedExpr) -> IdedExpr {
    let wrap = |name: &str, inner: IdedExpr| IdedExpr {
        id: inner.id,
        expr: Expr::Call(CallExpr { func_name: name.to_string(), target: None, args: vec![inner] }),
    };
    e.expr = match e.expr {
        Expr::Call(call) => {
            let bookkeeping =
                call.args.iter().any(|a| matches!(&a.expr, Expr::Ident(n) if n.starts_with('@')));
            let free = bookkeeping
                || matches!(
                    call.func_name.as_str(),
                    operators::LOGICAL_AND | operators::LOGICAL_OR | operators::CONDITIONAL
                );
            let call = CallExpr {
                func_name: call.func_name,
                target: call.target.map(|t| Box::new(meter(*t))),
                args: call.args.into_iter().map(meter).collect(),
            };
            if free {
                Expr::Call(call)
            } else {
                return wrap(CHARGE_CALL, IdedExpr { id: e.id, expr: Expr::Call(call) });
            }
        }
        Expr::Comprehension(c) => {
            let c = *c;
            Expr::Comprehension(Box::new(ComprehensionExpr {
                iter_range: wrap(CHARGE_RANGE, meter(c.iter_range)),
                accu_init: meter(c.accu_init),
                loop_cond: meter(c.loop_cond),
                loop_step: meter(c.loop_step),
                result: meter(c.result),
                ..c
            }))
        }
        Expr::List(mut list) => {
            list.elements = list.elements.into_iter().map(meter).collect();
            Expr::List(list)
        }
        Expr::Map(mut map) => {
            for entry in &mut map.entries {
                meter_entry(&mut entry.expr);
            }
            Expr::Map(map)
        }
        Expr::Struct(mut strct) => {
            for entry in &mut strct.entries {
                meter_entry(&mut entry.expr);
            }
            Expr::Struct(strct)
        }
        Expr::Select(mut select) => {
            select.operand = Box::new(meter(*select.operand));
            Expr::Select(select)
        }
        other @ (Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified) => other,
    };
    e
}

/// [`meter`] on the expressions of a map or struct entry.
fn meter_entry(entry: &mut EntryExpr) {
    let take = |e: &mut IdedExpr| *e = meter(std::mem::take(e));
    match entry {
        EntryExpr::StructField(field) => take(&mut field.value),
        EntryExpr::MapEntry(entry) => {
            take(&mut entry.key);
            take(&mut entry.value);
        }
    }
}

// ---------------------------------------------------------------------------
// The device value
// ---------------------------------------------------------------------------

/// Splits a qualified name into domain and id, the driver being the domain of
/// a name without one (upstream `parseQualifiedName`).
fn parse_qualified_name<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

/// The CEL value of one attribute (upstream `getAttributeValue`: the list
/// forms first, then the scalars).
fn attribute_value(attr: &DeviceAttribute) -> Result<Box<dyn Val>, String> {
    fn list(items: Vec<Box<dyn Val>>) -> Box<dyn Val> {
        Box::new(CelList::from(items))
    }
    if let Some(v) = &attr.ints {
        return Ok(list(v.iter().map(|i| Box::new(CelInt::from(*i)) as Box<dyn Val>).collect()));
    }
    if let Some(v) = &attr.bools {
        return Ok(list(v.iter().map(|b| Box::new(CelBool::from(*b)) as Box<dyn Val>).collect()));
    }
    if let Some(v) = &attr.strings {
        return Ok(list(
            v.iter().map(|s| Box::new(CelString::from(s.clone())) as Box<dyn Val>).collect(),
        ));
    }
    if let Some(v) = &attr.versions {
        let versions = v
            .iter()
            .map(|s| Semver::parse(s).map(|v| Box::new(v) as Box<dyn Val>))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("parse semantic version: {e}"))?;
        return Ok(list(versions));
    }
    if let Some(i) = attr.int {
        return Ok(Box::new(CelInt::from(i)));
    }
    if let Some(b) = attr.bool {
        return Ok(Box::new(CelBool::from(b)));
    }
    if let Some(s) = &attr.string {
        return Ok(Box::new(CelString::from(s.clone())));
    }
    if let Some(s) = &attr.version {
        return Semver::parse(s)
            .map(|v| Box::new(v) as Box<dyn Val>)
            .map_err(|e| format!("parse semantic version: {e}"));
    }
    Err("unsupported attribute value".to_string())
}

static DEVICE_TYPE: Type = Type::new_unspecified_type("kubernetes.DRADevice");

/// `device`: its fields, prebuilt.
#[derive(Debug)]
struct DeviceVal {
    driver: CelString<'static>,
    allow_multiple_allocations: CelBool,
    attributes: DomainMap,
    capacity: DomainMap,
}

/// `device` as bound in a [`Context`]: a borrow of the prebuilt value, so
/// binding copies nothing.
#[derive(Debug, Clone, Copy)]
struct DeviceRef<'a>(&'a DeviceVal);

impl Indexer for DeviceRef<'_> {
    fn get<'b, 'w>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
    where
        Self: 'w,
    {
        let device = self.0;
        match idx.downcast_ref::<CelString>().map(CelString::inner) {
            Some("driver") => Ok(CowVal::Borrowed(&device.driver)),
            Some("attributes") => Ok(CowVal::Borrowed(&device.attributes)),
            Some("capacity") => Ok(CowVal::Borrowed(&device.capacity)),
            Some("allowMultipleAllocations") => {
                Ok(CowVal::Borrowed(&device.allow_multiple_allocations))
            }
            Some(other) => Err(ExecutionError::no_such_key(other)),
            None => Err(ExecutionError::UnexpectedType {
                got: idx.get_type().name().to_owned(),
                want: "string".to_owned(),
            }),
        }
    }

    fn steal<'w>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'w>, ExecutionError>
    where
        Self: 'w,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl Val for DeviceRef<'_> {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }

    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        // Two borrows of one device are equal: the other value (of this type,
        // so a `DeviceRef`, which cannot be downcast as it borrows) hands out
        // the very same attributes map.
        other.get_type() == &DEVICE_TYPE
            && other
                .as_indexer()
                .and_then(|i| i.get(&CelString::from("attributes")).ok())
                .is_some_and(|a| {
                    std::ptr::eq(
                        a.as_ref() as *const dyn Val as *const u8,
                        &self.0.attributes as *const DomainMap as *const u8,
                    )
                })
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(*self)
    }
}

/// `device.attributes` or `device.capacity`: a map of domain to a map of id
/// to value, where a domain without entries is an empty map (upstream's
/// `newStringInterfaceMapWithDefault`). `in`, `size()` and the
/// comprehensions see the domains that have entries.
#[derive(Debug)]
struct DomainMap {
    domains: CelMap<'static>,
    empty: CelMap<'static>,
}

impl DomainMap {
    fn new(domains: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>>) -> Self {
        let domains: HashMap<CelMapKey<'static>, Box<dyn Val>> = domains
            .into_iter()
            .map(|(domain, ids)| {
                (CelMapKey::from(domain), Box::new(CelMap::from(ids)) as Box<dyn Val>)
            })
            .collect();
        DomainMap { domains: CelMap::from(domains), empty: CelMap::default() }
    }
}

impl Indexer for DomainMap {
    fn get<'b, 'w>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
    where
        Self: 'w,
    {
        match self.domains.get(idx) {
            Err(ExecutionError::NoSuchKey(_)) => Ok(CowVal::Borrowed(&self.empty)),
            other => other,
        }
    }

    fn steal<'w>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'w>, ExecutionError>
    where
        Self: 'w,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl Val for DomainMap {
    fn get_type(&self) -> &Type {
        &types::MAP_TYPE
    }

    fn cel_type() -> &'static Type {
        &types::MAP_TYPE
    }

    fn as_container(&self) -> Option<&dyn Container> {
        self.domains.as_container()
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_iterable<'b, 'w>(&'b self) -> Option<&'b (dyn Iterable + 'w)>
    where
        Self: 'w,
    {
        self.domains.as_iterable()
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.domains.as_sizer()
    }

    fn equals(&self, other: &dyn Val) -> bool {
        match other.as_any().and_then(|o| o.downcast_ref::<DomainMap>()) {
            Some(o) => self.domains.equals(&o.domains),
            None => self.domains.equals(other),
        }
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(DomainMap { domains: self.domains.clone(), empty: CelMap::default() })
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for DomainMap {}

// ---------------------------------------------------------------------------
// semver
// ---------------------------------------------------------------------------

static SEMVER_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Semver");

/// One dot-separated pre-release identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PreRelease {
    Numeric(u64),
    Alpha(String),
}

impl PreRelease {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PreRelease::Numeric(a), PreRelease::Numeric(b)) => a.cmp(b),
            (PreRelease::Numeric(_), PreRelease::Alpha(_)) => Ordering::Less,
            (PreRelease::Alpha(_), PreRelease::Numeric(_)) => Ordering::Greater,
            (PreRelease::Alpha(a), PreRelease::Alpha(b)) => a.cmp(b),
        }
    }
}

/// A semantic version, parsed and compared as `github.com/blang/semver/v4`
/// (the library Kubernetes' CEL semver type wraps): strict
/// `major.minor.patch[-pre][+build]`, no leading zeros, build metadata
/// ignored by comparisons and equality.
#[derive(Debug, Clone)]
pub struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<PreRelease>,
    build: Vec<String>,
}

fn is_alphanumeric_id(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn parse_version_number(s: &str, what: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("Invalid character(s) found in {what} number {s:?}"));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!("{} number must not contain leading zeroes {s:?}", capitalize(what)));
    }
    s.parse().map_err(|e| format!("{e}"))
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl Semver {
    /// Parses as blang/semver's `Parse`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("Version string empty".to_string());
        }
        let parts: Vec<&str> = s.splitn(3, '.').collect();
        if parts.len() != 3 {
            return Err("No Major.Minor.Patch elements found".to_string());
        }
        let major = parse_version_number(parts[0], "major")?;
        let minor = parse_version_number(parts[1], "minor")?;
        let mut rest = parts[2];
        let mut build = Vec::new();
        if let Some((r, b)) = rest.split_once('+') {
            for id in b.split('.') {
                if id.is_empty() {
                    return Err("Build meta data is empty".to_string());
                }
                if !is_alphanumeric_id(id) {
                    return Err(format!("Invalid character(s) found in build meta data {id:?}"));
                }
                build.push(id.to_string());
            }
            rest = r;
        }
        let mut pre = Vec::new();
        if let Some((r, p)) = rest.split_once('-') {
            for id in p.split('.') {
                if id.is_empty() {
                    return Err("Prerelease is empty".to_string());
                }
                if id.bytes().all(|b| b.is_ascii_digit()) {
                    if id.len() > 1 && id.starts_with('0') {
                        return Err(format!(
                            "Numeric PreRelease version must not contain leading zeroes {id:?}"
                        ));
                    }
                    pre.push(PreRelease::Numeric(id.parse().map_err(|e| format!("{e}"))?));
                } else if is_alphanumeric_id(id) {
                    pre.push(PreRelease::Alpha(id.to_string()));
                } else {
                    return Err(format!("Invalid character(s) found in prerelease {id:?}"));
                }
            }
            rest = r;
        }
        let patch = parse_version_number(rest, "patch")?;
        Ok(Semver { major, minor, patch, pre, build })
    }

    /// Parses as Kubernetes' `normalizeAndParse` (`semver(s, true)`): drops a
    /// leading `v` and leading zeros, fills a missing minor or patch with 0.
    pub fn parse_normalized(s: &str) -> Result<Self, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s
            .splitn(3, '.')
            .map(|p| {
                if p.len() > 1 {
                    let t = p.trim_start_matches('0');
                    if t.is_empty() || !t.as_bytes()[0].is_ascii_digit() {
                        format!("0{t}")
                    } else {
                        t.to_string()
                    }
                } else {
                    p.to_string()
                }
            })
            .collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err("short version cannot contain PreRelease/Build meta data".to_string());
            }
            while parts.len() < 3 {
                parts.push("0".to_string());
            }
        }
        Semver::parse(&parts.join("."))
    }

    /// Semver 2.0 precedence (build metadata ignored), as blang's `Compare`.
    pub fn compare(&self, other: &Semver) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let o = a.cmp(b);
                        if o != Ordering::Equal {
                            return o;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            })
    }
}

impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        for (i, p) in self.pre.iter().enumerate() {
            f.write_str(if i == 0 { "-" } else { "." })?;
            match p {
                PreRelease::Numeric(n) => write!(f, "{n}")?,
                PreRelease::Alpha(s) => f.write_str(s)?,
            }
        }
        if !self.build.is_empty() {
            write!(f, "+{}", self.build.join("."))?;
        }
        Ok(())
    }
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }

    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Semver>().is_some_and(|o| self.compare(o) == Ordering::Equal)
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Semver {}

// ---------------------------------------------------------------------------
// quantity
// ---------------------------------------------------------------------------

static QUANTITY_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Quantity");

/// Nano-units per unit: Kubernetes quantities have at most nine decimals.
const NANO: i128 = 1_000_000_000;

/// A Kubernetes quantity, exactly, in nano-units (the finest precision a
/// `resource.Quantity` keeps; finer digits round up, away from zero, as
/// upstream's parser does). Values beyond ±1.7e29 units, which upstream keeps
/// as arbitrary-precision decimals, are refused as too large.
///
/// Not parsed with convoy-api's `resource::parse_milli`, on purpose: CEL's
/// `quantity()` must give what upstream's `resource.Quantity` gives, and
/// that parser, built for pod requests, differs in ways CEL expressions can
/// see: it keeps thousandths, not billionths (`quantity("1n")` would equal
/// `quantity("1m")`, and `quantity("1n").sign()` is 1 here), it holds an
/// `i64` of thousandths (up to ~9.2e15 units, where DRA capacities may be
/// larger), it accepts surrounding whitespace, which `ParseQuantity` refuses,
/// and its error messages are not upstream's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity {
    nanos: i128,
}

const QUANTITY_FORMAT_ERROR: &str = "quantities must match the regular expression \
     '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

impl Quantity {
    /// Parses as `resource.ParseQuantity`: a signed decimal number, then a
    /// binary (`Ki` .. `Ei`), decimal (`n` `u` `m` `k` `M` .. `E`) or
    /// exponent (`e3`, `E-2`) suffix.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err(QUANTITY_FORMAT_ERROR.to_string());
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        let negative = match bytes[0] {
            b'-' => {
                i = 1;
                true
            }
            b'+' => {
                i = 1;
                false
            }
            _ => false,
        };
        // Digits, at most one '.', at least one digit.
        let mut mantissa: i128 = 0;
        let mut frac_digits: i32 = 0;
        let mut seen_dot = false;
        let mut seen_digit = false;
        // Digits beyond what i128 holds only matter as far as rounding goes;
        // a mantissa that large is refused below anyway.
        while i < bytes.len() {
            match bytes[i] {
                b'0'..=b'9' => {
                    seen_digit = true;
                    mantissa = mantissa
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(i128::from(bytes[i] - b'0')))
                        .ok_or_else(|| "quantity too large".to_string())?;
                    if seen_dot {
                        frac_digits += 1;
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => break,
            }
            i += 1;
        }
        if !seen_digit {
            return Err(QUANTITY_FORMAT_ERROR.to_string());
        }
        let suffix = &s[i..];
        // value = mantissa * 10^-frac * base^exp
        let (base, exp): (i128, i32) = match suffix {
            "" => (10, 0),
            "n" => (10, -9),
            "u" => (10, -6),
            "m" => (10, -3),
            "k" => (10, 3),
            "M" => (10, 6),
            "G" => (10, 9),
            "T" => (10, 12),
            "P" => (10, 15),
            "E" => (10, 18),
            "Ki" => (2, 10),
            "Mi" => (2, 20),
            "Gi" => (2, 30),
            "Ti" => (2, 40),
            "Pi" => (2, 50),
            "Ei" => (2, 60),
            _ => {
                let rest = suffix
                    .strip_prefix('e')
                    .or_else(|| suffix.strip_prefix('E'))
                    .ok_or_else(|| "unable to parse quantity's suffix".to_string())?;
                let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err("unable to parse quantity's suffix".to_string());
                }
                let e: i32 =
                    rest.parse().map_err(|_| "unable to parse quantity's suffix".to_string())?;
                (10, e)
            }
        };
        // nanos = mantissa * base^exp * 10^(9 - frac), rounded up (away from
        // zero).
        let mut num = mantissa;
        let mut den: i128 = 1;
        let too_large = || "quantity too large".to_string();
        let pow = |b: i128, e: u32| b.checked_pow(e).ok_or_else(too_large);
        if exp >= 0 {
            num = num.checked_mul(pow(base, exp as u32)?).ok_or_else(too_large)?;
        } else {
            den = pow(base, (-exp) as u32)?;
        }
        let scale = 9 - frac_digits;
        if scale >= 0 {
            num = num.checked_mul(pow(10, scale as u32)?).ok_or_else(too_large)?;
        } else {
            den = den.checked_mul(pow(10, (-scale) as u32)?).ok_or_else(too_large)?;
        }
        let mut nanos = num / den;
        if num % den != 0 {
            nanos += 1;
        }
        Ok(Quantity { nanos: if negative { -nanos } else { nanos } })
    }

    /// The value in whole units when it is one that fits an int64
    /// (upstream `AsInt64`).
    pub fn as_i64(&self) -> Option<i64> {
        if self.nanos % NANO != 0 {
            return None;
        }
        i64::try_from(self.nanos / NANO).ok()
    }

    fn as_f64(&self) -> f64 {
        self.nanos as f64 / NANO as f64
    }
}

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>().is_some_and(|o| o == self)
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w> {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Quantity {}

// ---------------------------------------------------------------------------
// The environment
// ---------------------------------------------------------------------------

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Ret<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

fn arg<'a, 'b, 'v, T: StaticVal>(
    args: &'a Args<'b, 'v>,
    i: usize,
    f: &str,
) -> Result<&'a T, ExecutionError> {
    args.get(i)
        .and_then(|a| a.as_any())
        .and_then(|a| a.downcast_ref::<T>())
        .ok_or_else(|| ExecutionError::function_error(f, "unexpected argument type"))
}

fn str_arg<'a>(args: &'a Args<'_, '_>, i: usize, f: &str) -> Result<&'a str, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelString>())
        .map(CelString::inner)
        .ok_or_else(|| ExecutionError::function_error(f, "expected a string"))
}

fn bool_arg(args: &Args<'_, '_>, i: usize, f: &str) -> Result<bool, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelBool>())
        .map(|b| *b.inner())
        .ok_or_else(|| ExecutionError::function_error(f, "expected a bool"))
}

fn int_arg(args: &Args<'_, '_>, i: usize, f: &str) -> Result<i64, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelInt>())
        .map(|b| *b.inner())
        .ok_or_else(|| ExecutionError::function_error(f, "expected an int"))
}

fn ordering_int(o: Ordering) -> i64 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

fn owned<'b, 'v, T: Val + 'v>(v: T) -> Ret<'b, 'v> {
    Ok(CowVal::owned(v))
}

fn semver_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0, "semver")?;
    owned(Semver::parse(s).map_err(|e| ExecutionError::function_error("semver", e))?)
}
fn semver_of_normalized<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0, "semver")?;
    let v =
        if bool_arg(&args, 1, "semver")? { Semver::parse_normalized(s) } else { Semver::parse(s) };
    owned(v.map_err(|e| ExecutionError::function_error("semver", e))?)
}
fn is_semver<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0, "isSemver")?;
    owned(CelBool::from(Semver::parse(s).is_ok()))
}
fn is_semver_normalized<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0, "isSemver")?;
    let ok = if bool_arg(&args, 1, "isSemver")? {
        Semver::parse_normalized(s).is_ok()
    } else {
        Semver::parse(s).is_ok()
    };
    owned(CelBool::from(ok))
}
fn semver_major<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let v = arg::<Semver>(&args, 0, "major")?;
    owned(CelInt::from(v.major as i64))
}
fn semver_minor<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let v = arg::<Semver>(&args, 0, "minor")?;
    owned(CelInt::from(v.minor as i64))
}
fn semver_patch<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let v = arg::<Semver>(&args, 0, "patch")?;
    owned(CelInt::from(v.patch as i64))
}
fn semver_compare(args: &Args<'_, '_>, f: &str) -> Result<Ordering, ExecutionError> {
    Ok(arg::<Semver>(args, 0, f)?.compare(arg::<Semver>(args, 1, f)?))
}
fn semver_compare_to<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    owned(CelInt::from(ordering_int(semver_compare(&args, "compareTo")?)))
}
fn semver_greater<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    owned(CelBool::from(semver_compare(&args, "isGreaterThan")? == Ordering::Greater))
}
fn semver_less<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    owned(CelBool::from(semver_compare(&args, "isLessThan")? == Ordering::Less))
}

fn quantity_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0, "quantity")?;
    owned(Quantity::parse(s).map_err(|e| ExecutionError::function_error("quantity", e))?)
}
fn is_quantity<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0, "isQuantity")?;
    owned(CelBool::from(Quantity::parse(s).is_ok()))
}
fn quantity_compare(args: &Args<'_, '_>, f: &str) -> Result<Ordering, ExecutionError> {
    Ok(arg::<Quantity>(args, 0, f)?.cmp(arg::<Quantity>(args, 1, f)?))
}
fn quantity_compare_to<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    owned(CelInt::from(ordering_int(quantity_compare(&args, "compareTo")?)))
}
fn quantity_greater<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    owned(CelBool::from(quantity_compare(&args, "isGreaterThan")? == Ordering::Greater))
}
fn quantity_less<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    owned(CelBool::from(quantity_compare(&args, "isLessThan")? == Ordering::Less))
}
fn quantity_as_integer<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, "asInteger")?;
    let i = q.as_i64().ok_or_else(|| {
        ExecutionError::function_error("asInteger", "cannot convert value to integer")
    })?;
    owned(CelInt::from(i))
}
fn quantity_is_integer<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, "isInteger")?;
    owned(CelBool::from(q.as_i64().is_some()))
}
fn quantity_as_float<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, "asApproximateFloat")?;
    owned(CelDouble::from(q.as_f64()))
}
fn quantity_sign<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, "sign")?;
    owned(CelInt::from(q.nanos.signum() as i64))
}
fn quantity_arith<'b, 'v>(args: Args<'b, 'v>, f: &str, sign: i128) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, f)?;
    let rhs = match arg::<Quantity>(&args, 1, f) {
        Ok(r) => r.nanos,
        Err(_) => i128::from(int_arg(&args, 1, f)?) * NANO,
    };
    let nanos = q
        .nanos
        .checked_add(sign * rhs)
        .ok_or_else(|| ExecutionError::function_error(f, "quantity too large"))?;
    owned(Quantity { nanos })
}
fn quantity_add<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    quantity_arith(args, "add", 1)
}
fn quantity_sub<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    quantity_arith(args, "sub", -1)
}

/// `x.includes(v)` (upstream 1.36+, with DRAListTypeAttributes): whether the
/// list `x` has an element equal to `v`, or the scalar `x` equals `v`.
fn includes<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (x, v) = match args.as_slice() {
        [x, v] => (x, v),
        _ => return Err(ExecutionError::function_error("includes", "expected one argument")),
    };
    let found = match x.downcast_ref::<CelList>() {
        Some(list) => list.inner().iter().any(|e| e.equals(v.as_ref())),
        None => x.equals(v.as_ref()),
    };
    owned(CelBool::from(found))
}

/// `cel.bind(x, init, expr)`: `expr` with `x` bound to `init`, expanded as
/// cel-go's bindings extension does, to a comprehension over an empty list
/// whose accumulator is `x`.
fn bind_macro() -> Macro {
    Macro::receiver("bind", 3, |helper, target, args| {
        let is_cel =
            matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(name)) if name == "cel");
        if !is_cel {
            return Ok(None);
        }
        let var = match &args[0].expr {
            Expr::Ident(name) => name.clone(),
            _ => {
                return Err(helper.new_error(
                    args[0].id,
                    "cel.bind() variable names must be simple identifiers",
                ));
            }
        };
        let result = args.pop().expect("three arguments");
        let init = args.pop().expect("three arguments");
        let iter_range = helper.next_expr(Expr::List(ListExpr::new(Vec::new())));
        let loop_cond = helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into())));
        let loop_step = helper.next_expr(Expr::Ident(var.clone()));
        Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(ComprehensionExpr {
            iter_range,
            iter_var: "#unused".to_string(),
            iter_var2: None,
            accu_var: var,
            accu_init: init,
            loop_cond,
            loop_step,
            result,
        })))))
    })
}

fn build_env() -> Env {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings).expect("strings extension");
    env.add_extension(cel::extensions::lists).expect("lists extension");
    env.add_macro(bind_macro()).expect("cel.bind macro");
    let dyn_type = || types::DYN_TYPE.to_owned();
    env.add_overload(CHARGE_CALL, "convoy_charge_dyn", vec![dyn_type()], charge_call)
        .expect(CHARGE_CALL);
    env.add_overload(CHARGE_RANGE, "convoy_charge_range_dyn", vec![dyn_type()], charge_range)
        .expect(CHARGE_RANGE);
    let string = || types::STRING_TYPE.to_owned();
    let boolean = || types::BOOL_TYPE.to_owned();
    let int = || types::INT_TYPE.to_owned();
    let semver = || SEMVER_TYPE.to_owned();
    let quantity = || QUANTITY_TYPE.to_owned();
    let mut global =
        |name: &str, id: &str, args: Vec<Type>, f: cel::common::functions::Function| {
            env.add_overload(name, id, args, f).expect(id);
        };
    global("semver", "string_to_semver", vec![string()], semver_of);
    global("semver", "string_bool_to_semver", vec![string(), boolean()], semver_of_normalized);
    global("isSemver", "is_semver_string", vec![string()], is_semver);
    global("isSemver", "is_semver_string_bool", vec![string(), boolean()], is_semver_normalized);
    global("quantity", "string_to_quantity", vec![string()], quantity_of);
    global("isQuantity", "is_quantity_string", vec![string()], is_quantity);
    let mut member = |name: &str,
                      id: &str,
                      target: Type,
                      args: Vec<Type>,
                      f: cel::common::functions::Function| {
        env.add_member_overload(name, id, target, args, f).expect(id);
    };
    member(
        "includes",
        "dyn_includes_dyn",
        types::DYN_TYPE.to_owned(),
        vec![types::DYN_TYPE.to_owned()],
        includes,
    );
    member("major", "semver_major", semver(), vec![], semver_major);
    member("minor", "semver_minor", semver(), vec![], semver_minor);
    member("patch", "semver_patch", semver(), vec![], semver_patch);
    member("compareTo", "semver_compare_to", semver(), vec![semver()], semver_compare_to);
    member("isGreaterThan", "semver_is_greater_than", semver(), vec![semver()], semver_greater);
    member("isLessThan", "semver_is_less_than", semver(), vec![semver()], semver_less);
    member("compareTo", "quantity_compare_to", quantity(), vec![quantity()], quantity_compare_to);
    member(
        "isGreaterThan",
        "quantity_is_greater_than",
        quantity(),
        vec![quantity()],
        quantity_greater,
    );
    member("isLessThan", "quantity_is_less_than", quantity(), vec![quantity()], quantity_less);
    member("asInteger", "quantity_get_int", quantity(), vec![], quantity_as_integer);
    member("isInteger", "quantity_is_integer", quantity(), vec![], quantity_is_integer);
    member("asApproximateFloat", "quantity_get_float", quantity(), vec![], quantity_as_float);
    member("sign", "quantity_sign", quantity(), vec![], quantity_sign);
    member("add", "quantity_add", quantity(), vec![quantity()], quantity_add);
    member("add", "quantity_add_int", quantity(), vec![int()], quantity_add);
    member("sub", "quantity_sub", quantity(), vec![quantity()], quantity_sub);
    member("sub", "quantity_sub_int", quantity(), vec![int()], quantity_sub);
    env
}

#[cfg(test)]
mod tests;
