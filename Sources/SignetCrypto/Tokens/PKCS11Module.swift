internal import CPKCS11
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import SignetCore

/// A loaded PKCS#11 module (`dlopen` + `C_GetFunctionList` + `C_Initialize`), kept for the life
/// of the process: a module is initialised once per process, and other code in the same process
/// may share it (then C_Initialize answers "already initialised", which is fine).
final class PKCS11Module: @unchecked Sendable {
    // The function list belongs to the module, which is never unloaded.
    let functions: UnsafeMutablePointer<CK_FUNCTION_LIST>
    let path: String

    private static let loaded = Mutex<[String: PKCS11Module]>([:])

    /// Where the module comes from when neither --pkcs11-module nor the URI names one:
    /// `SIGNET_PKCS11_MODULE`, else p11-kit's proxy (every module p11-kit is configured with).
    static func defaultPath(environment: [String: String]) -> String? {
        if let path = environment["SIGNET_PKCS11_MODULE"], !path.isEmpty { return path }
        for candidate in [
            "/usr/lib/x86_64-linux-gnu/p11-kit-proxy.so", "/usr/lib/aarch64-linux-gnu/p11-kit-proxy.so",
            "/usr/lib64/p11-kit-proxy.so", "/usr/lib/p11-kit-proxy.so"
        ] where access(candidate, R_OK) == 0 {
            return candidate
        }
        return nil
    }

    /// The module to load for `uri`: `module` (--pkcs11-module), else the URI's `module-path=`,
    /// else ``defaultPath(environment:)``; `.usage` when there is none.
    static func path(for uri: PKCS11URI, module: String?, environment: [String: String]) throws -> String {
        guard let path = module ?? uri.modulePath ?? defaultPath(environment: environment) else {
            throw SignetError(
                .usage,
                "no PKCS#11 module to reach \(uri): give --pkcs11-module PATH (for SoftHSM2: /usr/lib/softhsm/libsofthsm2.so) or set SIGNET_PKCS11_MODULE")
        }
        return path
    }

    /// The module at `path`, loaded and initialised once.
    ///
    /// - Throws: ``/SignetCore/SignetError`` `.tokenModule` (exit 5) when it cannot be loaded or initialised.
    static func load(_ path: String) throws -> PKCS11Module {
        try loaded.withLock { modules in
            if let module = modules[path] { return module }
            let module = try PKCS11Module(path: path)
            modules[path] = module
            return module
        }
    }

    private init(path: String) throws {
        self.path = path
        guard path.hasPrefix("/") else {
            throw SignetError(
                .tokenModule,
                "the PKCS#11 module '\(path)' is not an absolute path; give the module's full path (e.g. /usr/lib/softhsm/libsofthsm2.so) so that no library search path chooses it",
                path: path)
        }
        guard access(path, R_OK) == 0 else {
            throw SignetError(
                .tokenModule,
                "cannot read the PKCS#11 module '\(path)': \(String(cString: strerror(errno))); install the token's module or give its path with --pkcs11-module",
                path: path)
        }
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "unknown error"
            throw SignetError(.tokenModule, "cannot load the PKCS#11 module '\(path)': \(reason)", path: path)
        }
        guard let symbol = dlsym(handle, "C_GetFunctionList") else {
            dlclose(handle)
            throw SignetError(.tokenModule, "'\(path)' is not a PKCS#11 module (it has no C_GetFunctionList)", path: path)
        }
        let getFunctionList = unsafeBitCast(symbol, to: CK_C_GetFunctionList.self)
        var list: UnsafeMutablePointer<CK_FUNCTION_LIST>?
        let rv = getFunctionList(&list)
        guard rv == CKR_OK, let list else {
            dlclose(handle)
            throw SignetError(.tokenModule, "the PKCS#11 module '\(path)' failed C_GetFunctionList (\(PKCS11Module.name(of: rv)))", path: path)
        }
        // Signet signs from several threads: the module must lock with the OS's primitives.
        var arguments = CK_C_INITIALIZE_ARGS()
        arguments.flags = CK_FLAGS(CKF_OS_LOCKING_OK)
        let initialised = list.pointee.C_Initialize(&arguments)
        guard initialised == CKR_OK || initialised == CKR_CRYPTOKI_ALREADY_INITIALIZED else {
            dlclose(handle)
            throw SignetError(
                .tokenModule,
                "the PKCS#11 module '\(path)' failed to initialise (\(PKCS11Module.name(of: initialised))); check its configuration (for SoftHSM2: SOFTHSM2_CONF and its token directory)",
                path: path)
        }
        functions = list
    }

    /// A readable name for a CK_RV.
    static func name(of rv: CK_RV) -> String {
        let names: [CK_RV: String] = [
            CK_RV(CKR_OK): "CKR_OK", CK_RV(CKR_GENERAL_ERROR): "CKR_GENERAL_ERROR", CK_RV(CKR_ARGUMENTS_BAD): "CKR_ARGUMENTS_BAD",
            CK_RV(CKR_PIN_INCORRECT): "CKR_PIN_INCORRECT", CK_RV(CKR_PIN_LOCKED): "CKR_PIN_LOCKED", CK_RV(CKR_PIN_EXPIRED): "CKR_PIN_EXPIRED",
            CK_RV(CKR_PIN_LEN_RANGE): "CKR_PIN_LEN_RANGE", CK_RV(CKR_TOKEN_NOT_PRESENT): "CKR_TOKEN_NOT_PRESENT",
            CK_RV(CKR_DEVICE_ERROR): "CKR_DEVICE_ERROR", CK_RV(CKR_DEVICE_REMOVED): "CKR_DEVICE_REMOVED",
            CK_RV(CKR_MECHANISM_INVALID): "CKR_MECHANISM_INVALID", CK_RV(CKR_MECHANISM_PARAM_INVALID): "CKR_MECHANISM_PARAM_INVALID",
            CK_RV(CKR_KEY_TYPE_INCONSISTENT): "CKR_KEY_TYPE_INCONSISTENT", CK_RV(CKR_KEY_FUNCTION_NOT_PERMITTED): "CKR_KEY_FUNCTION_NOT_PERMITTED",
            CK_RV(CKR_USER_NOT_LOGGED_IN): "CKR_USER_NOT_LOGGED_IN", CK_RV(CKR_SESSION_COUNT): "CKR_SESSION_COUNT",
            CK_RV(CKR_CRYPTOKI_NOT_INITIALIZED): "CKR_CRYPTOKI_NOT_INITIALIZED", CK_RV(CKR_FUNCTION_FAILED): "CKR_FUNCTION_FAILED",
            CK_RV(CKR_HOST_MEMORY): "CKR_HOST_MEMORY", CK_RV(CKR_DATA_LEN_RANGE): "CKR_DATA_LEN_RANGE"
        ]
        return names[rv] ?? "CK_RV 0x\(String(rv, radix: 16))"
    }
}
