internal import COpenSSL
internal import CZip
internal import CCurl
internal import CSignetCurl

/// Versions of Signet and the libraries it runs on, for `signet --version` and bug reports.
public enum SignetVersion {
    /// Signet's own version.
    public static let signet = "0.1.0"
    /// The OpenSSL library actually loaded at run time (may differ from the headers built against).
    public static var openSSL: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }
    /// The libcurl library loaded at run time.
    public static var curl: String { String(cString: signet_curl_version()) }
    /// The libzip library loaded at run time.
    public static var libzip: String { String(cString: zip_libzip_version()) }
    /// One line: "0.1.0 (OpenSSL 3.0.x, libzip 1.x)".
    public static var summary: String { "\(signet) (\(openSSL), libzip \(libzip))" }
}
