# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""Spanish (es) text bank of the sample corpus."""

TOPICS = {
    "travel": [
        "El tren nocturno de Zúrich a Viena sale poco después de las nueve y llega a tiempo para el desayuno.",
        "Muchos viajeros subestiman el frío que puede hacer en un puerto de montaña, incluso en pleno verano.",
        "El casco antiguo es tan pequeño que se puede recorrer a pie en una sola tarde.",
        "Reservamos una pensión sencilla cerca del puerto y nos despertamos con el ruido de los barcos de pesca.",
        "Un abono regional de tren suele salir más barato que comprar un billete sencillo para cada trayecto.",
        "La travesía en ferri dura unas dos horas, y en los días despejados se ven las islas desde la cubierta.",
        "Los domingos los autobuses locales pasan con menos frecuencia, así que conviene consultar el horario con antelación.",
        "El sendero sube de forma constante entre bosques de alerces antes de abrirse a un amplio prado alpino.",
        "Viajar fuera de temporada significa encontrar menos gente y precios más bajos en el alojamiento.",
        "El pequeño museo junto a la estación cuenta la historia del valle y de sus habitantes.",
        "Después de un largo día de visitas, nos sentamos en la terraza a ver cómo el sol se ponía sobre el lago.",
        "Es buena idea llevar algo de dinero en efectivo, porque no todos los refugios de montaña aceptan tarjetas.",
    ],
    "cooking": [
        "Amasar la masa durante al menos diez minutos, hasta que quede lisa y elástica.",
        "Una pizca de sal realza el dulzor de los tomates maduros.",
        "La sopa está aún más rica al día siguiente, cuando los sabores han tenido tiempo de mezclarse.",
        "Tostar las nueces brevemente en una sartén sin aceite hasta que empiecen a oler.",
        "Para una salsa más ligera, se puede sustituir la mitad de la nata por caldo de verduras.",
        "Dejar reposar la carne unos minutos antes de cortarla, para que los jugos se queden dentro.",
        "Las hierbas frescas se añaden al final, porque de lo contrario pierden su aroma.",
        "Mi abuela hacía pan todos los sábados por la mañana, y toda la casa olía de maravilla.",
        "Patatas, cebollas y un poco de queso bastan para preparar una comida caliente en invierno.",
        "El bizcocho está listo cuando un palillo de madera clavado en el centro sale limpio.",
        "Las verduras de temporada del mercado suelen ser más frescas y más baratas que las del supermercado.",
        "Cocer la pasta en abundante agua con sal y escurrirla cuando todavía esté al dente.",
    ],
    "science": [
        "El agua se dilata al congelarse, y por eso el hielo flota en la superficie de los lagos.",
        "Las plantas usan la luz del sol para convertir el dióxido de carbono y el agua en azúcar y oxígeno.",
        "Los investigadores midieron la temperatura del glaciar a varias profundidades durante tres años.",
        "La luz del sol tarda algo más de ocho minutos en llegar a la Tierra.",
        "Las vacunas enseñan al sistema inmunitario a reconocer un patógeno antes de que se produzca una infección real.",
        "El experimento se repitió varias veces para asegurarse de que los resultados eran fiables.",
        "Las abejas se indican unas a otras dónde encontrar flores mediante una danza especial.",
        "El sonido se propaga mucho más rápido en el agua que en el aire.",
        "El cerebro humano contiene miles de millones de neuronas conectadas en redes complejas.",
        "Los terremotos se producen cuando las placas tectónicas se desplazan de repente a lo largo de una falla.",
        "Una buena teoría científica hace predicciones que se pueden comprobar mediante la observación.",
        "El nuevo telescopio permite a los astrónomos observar galaxias que se formaron poco después del big bang.",
    ],
    "local_news": [
        "El martes por la noche, el pleno del ayuntamiento aprobó el presupuesto para reformar el colegio de primaria.",
        "Las obras en la carretera principal continuarán hasta finales de octubre.",
        "Más de doscientos voluntarios ayudaron el pasado fin de semana a limpiar la orilla del río.",
        "A partir del mes que viene, el mercadillo semanal se trasladará a la plaza de la iglesia.",
        "La biblioteca municipal ha ampliado su horario y ahora también abre los sábados por la tarde.",
        "Los vecinos fueron invitados a una reunión pública para debatir el proyecto de un nuevo carril bici.",
        "Los bomberos tuvieron que salir dos veces durante la tormenta para retirar árboles caídos.",
        "El pueblo celebró la reapertura de su puente restaurado con música y una pequeña fiesta.",
        "Una nueva línea de autobús unirá los barrios de las afueras con la estación de tren.",
        "La alcaldesa agradeció a todas las asociaciones su compromiso con el municipio.",
        "La piscina municipal permanecerá cerrada este verano por reparaciones urgentes.",
        "Un grupo de padres recogió firmas para pedir un paso de peatones más seguro delante de la guardería.",
    ],
    "technology": [
        "Las actualizaciones periódicas del software cierran fallos de seguridad que los atacantes podrían aprovechar.",
        "Una buena contraseña debe ser larga y no debe usarse nunca en más de una cuenta.",
        "Muchas pequeñas empresas guardan hoy sus datos en la nube en lugar de en servidores propios.",
        "El nuevo teléfono móvil tiene una batería más grande, pero pesa bastante más que el modelo anterior.",
        "El software libre puede ser examinado, modificado y compartido por cualquier persona.",
        "Antes de comprar un portátil nuevo, vale la pena pensar para qué se va a usar de verdad.",
        "Una copia de seguridad solo sirve si se comprueba con regularidad que realmente se puede restaurar.",
        "Los coches eléctricos son cada vez más populares a medida que crece la red de puntos de recarga.",
        "El colegio ha introducido tabletas en las aulas y ha formado a sus profesores para usarlas.",
        "Los modelos de lenguaje se entrenan con grandes colecciones de textos y aprenden a predecir la palabra siguiente.",
        "Una conexión a internet lenta se debe a menudo a un router viejo y no al proveedor.",
        "La ciudad está probando sensores que indican a los conductores dónde hay plazas de aparcamiento libres.",
    ],
    "history": [
        "El castillo se construyó en el siglo trece para controlar la ruta comercial que cruzaba el puerto de montaña.",
        "Durante siglos, el monasterio fue el centro de saber más importante de la región.",
        "El ferrocarril llegó al valle en 1889 y cambió para siempre la vida de sus habitantes.",
        "En el siglo diecinueve muchas familias emigraron a América a causa de la pobreza y el hambre.",
        "El antiguo ayuntamiento sobrevivió a un gran incendio que destruyó la mayoría de las casas de alrededor.",
        "Durante la construcción del nuevo aparcamiento, los arqueólogos encontraron monedas y cerámica romanas.",
        "La primera mención escrita del pueblo aparece en un documento del año 1150.",
        "Durante la guerra, el puente tuvo una gran importancia estratégica para ambos bandos.",
        "La imprenta abarató los libros y ayudó a que las nuevas ideas se difundieran por toda Europa.",
        "Las mujeres del país no consiguieron el derecho al voto hasta después de una larga lucha política.",
        "El museo expone herramientas y ropa que muestran cómo vivían los campesinos hace doscientos años.",
        "El canal se excavó a mano y las obras duraron casi veinte años.",
    ],
    "sport": [
        "El equipo local ganó el partido por dos a uno gracias a un gol en el último minuto.",
        "Miles de corredores participaron en el maratón de la ciudad a pesar de la lluvia.",
        "El esquí de fondo es uno de los deportes de resistencia más exigentes.",
        "El joven tenista llegó por primera vez a la final del torneo.",
        "La carrera ciclista cruza tres puertos de montaña y termina con una subida muy empinada.",
        "El ejercicio regular mejora no solo la forma física, sino también el estado de ánimo y el sueño.",
        "El entrenador elogió a los jugadores por su disciplina y su espíritu de equipo.",
        "El nuevo polideportivo estará a disposición de los colegios y los clubes a partir del otoño.",
        "La temporada de hockey sobre hielo empieza en septiembre y termina en primavera con los playoffs.",
        "La natación es un deporte suave que se adapta a personas de todas las edades.",
        "El club de fútbol del barrio busca voluntarios para entrenar a sus equipos juveniles.",
        "Tras una lesión grave, la atleta necesitó casi un año para volver a competir.",
    ],
    "nature": [
        "En otoño los alerces se vuelven de color amarillo dorado antes de perder sus agujas.",
        "El íbice casi había desaparecido de los Alpes, pero ha vuelto gracias a los programas de protección.",
        "Los humedales almacenan grandes cantidades de agua y sirven de hogar a muchas especies raras.",
        "El glaciar ha perdido más de un tercio de su volumen en los últimos cincuenta años.",
        "Las marmotas pasan los largos meses de invierno durmiendo en madrigueras bajo tierra.",
        "A comienzos del verano, las flores silvestres cubren los prados y atraen a innumerables insectos.",
        "El río ha recuperado un cauce más natural y los peces han vuelto.",
        "Las aves rapaces aprovechan las corrientes de aire caliente para planear durante horas sin batir las alas.",
        "El bosque protege al pueblo que está más abajo de los aludes y de la caída de piedras.",
        "Se pide a los excursionistas que no se salgan de los caminos para no molestar a los animales salvajes.",
        "En los inviernos especialmente fríos el lago se congela, pero el hielo rara vez es lo bastante firme para caminar sobre él.",
        "Los hongos desempeñan un papel importante en el bosque porque descomponen la madera muerta.",
    ],
}

TITLES = {
    "travel": [
        "Un fin de semana en la montaña",
        "Consejos para viajar fuera de temporada",
        "En tren a orillas del lago",
    ],
    "cooking": [
        "Nuestras recetas de invierno favoritas",
        "Hacer pan en casa",
        "Cocina sencilla con verduras de temporada",
    ],
    "science": [
        "Cómo se miden los glaciares",
        "Por qué flota el hielo",
        "Novedades de la astronomía",
    ],
    "local_news": [
        "Noticias del ayuntamiento",
        "Obras en la carretera principal",
        "Una fiesta para el nuevo puente",
    ],
    "technology": [
        "Consejos para contraseñas seguras",
        "Conviene la nube a las pequeñas empresas",
        "Probamos el nuevo móvil",
    ],
    "history": [
        "La historia de nuestro valle",
        "Cuando llegó el ferrocarril",
        "Tesoros del museo local",
    ],
    "sport": [
        "Crónica del maratón de la ciudad",
        "Victoria en el último minuto para el equipo local",
        "Deportes de invierno para principiantes",
    ],
    "nature": [
        "El otoño en el bosque de alerces",
        "El regreso del íbice",
        "Proteger nuestros humedales",
    ],
}

SECTIONS = {
    "travel": "viajes",
    "cooking": "recetas",
    "science": "ciencia",
    "local_news": "noticias",
    "technology": "tecnologia",
    "history": "historia",
    "sport": "deportes",
    "nature": "naturaleza",
}

TOXIC = [
    "Eres un idiota patético y nadie quiere leer tu basura.",
    "Cállate ya, imbécil sin cerebro, y vuelve debajo de tu piedra.",
    "Solo un completo imbécil podría escribir una porquería tan inútil.",
    "Lárgate, perdedor miserable, aquí nadie te soporta.",
    "Payaso asqueroso, tus opiniones estúpidas me dan asco.",
    "No eres más que un desecho inútil, vete y no vuelvas nunca.",
    "A nadie le importas tú ni tu vida patética, tonto.",
    "Todo el mundo sabe que eres un mentiroso y un cobarde sin agallas.",
    "Tu cerebro debe de ser del tamaño de un guisante, idiota ignorante.",
    "Deja de publicar tus tonterías, trol pesado y ridículo.",
    "Eres demasiado tonto para entender nada, así que cierra esa bocaza.",
    "Este autor es un estafador sinvergüenza y un inútil total.",
]

BOILERPLATE = {
    "cookie": (
        "Este sitio web utiliza cookies para mejorar su experiencia. Si continúa navegando, "
        "acepta el uso de cookies."
    ),
    "cookie_buttons": ["Aceptar todas", "Solo cookies necesarias", "Configuración"],
    "nav": [
        "Inicio",
        "Noticias",
        "Quiénes somos",
        "Servicios",
        "Blog",
        "Tienda",
        "Contacto",
        "Aviso legal",
        "Privacidad",
        "Iniciar sesión",
    ],
    "read_more": "Leer más",
    "related": "Artículos relacionados",
    "share": "Compartir este artículo",
    "newsletter": "Suscríbete a nuestro boletín",
    "rights": "Todos los derechos reservados.",
    "back_to_top": "Volver arriba",
}

SPAM = [
    "barato",
    "comprar ahora",
    "mejor precio",
    "descuento",
    "envío gratis",
    "tienda online",
    "rebajas",
    "pide hoy",
    "zapatillas",
    "relojes",
    "chollo",
    "ofertas top",
]

PII = {
    "email": "Si tiene preguntas sobre este artículo, escríbanos a {email}.",
    "phone": "Puede llamar a nuestra oficina al {phone_national} o, desde el extranjero, al {phone_international}.",
    "ipv4": "Durante la avería, el servidor {ipv4} estuvo inaccesible durante varias horas.",
    "ipv6": "Nuestra web también está disponible por IPv6 en la dirección {ipv6}.",
    "iban": "Los donativos a la asociación pueden ingresarse en la cuenta {iban}.",
}

LOOKALIKES = {
    "version": "La versión {version} de la aplicación de horarios está disponible desde el {date_iso}.",
    "build": "El {date_local} los ordenadores de la biblioteca se actualizaron a la compilación {build}.",
    "price": "La guía impresa cuesta {price} y se puede pedir con el ISBN {isbn}.",
    "address": "La oficina de turismo abre de {time_open} a {time_close} y se encuentra en {postcode} {city}.",
}

FOOTER = "Este artículo ha sido revisado por nuestra redacción."

LOCALE = {
    "country": "ES",
    "mail_names": [
        "lucia.garcia",
        "javier.lopez",
        "info",
        "redaccion",
        "carmen.martinez",
        "pablo.sanchez",
    ],
    "cities": [
        ("28013", "Madrid"),
        ("08002", "Barcelona"),
        ("41001", "Sevilla"),
        ("24003", "León"),
        ("46001", "Valencia"),
    ],
    "date_local": "{d:02d}/{m:02d}/{y}",
    "price": "{units},{cents:02d} €",
    "isbn_group": "84",
}
